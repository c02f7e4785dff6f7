"""Expected values of the public checks of lab05: recorded by `python -m speclab labs build` from
labs/source/lab05.ipynb, by running each public case on the solutions with the instructor's references.

Do not edit. One entry per call of `lab.expected(name, ...)` in a public case: (question, case, name,
index) -> (a digest of the inputs, the value, what the reference wrote into its arguments).
"""
from speclab.checks import recorded_tensor as T

VALUES = {
    ('q4', '60 % code at alpha 0.9, 40 % prose at alpha 0.3, c = 0.05: averaging speedups picks another K', 'choose', 0, ): (((((0.6, 0.9, ), (0.4, 0.3, ), ), 0.05, ), (), ), 5, {}, ),
    ('q4', '60 % code at alpha 0.9, 40 % prose at alpha 0.3, c = 0.05: averaging speedups picks another K', 'mean_speedup_k', 0, ): (((((0.6, 0.9, ), (0.4, 0.3, ), ), 0.05, ), (), ), 8, {}, ),
    ('q4', 'an expensive draft (c = 0.5) and a middling mix: K = 1', 'choose', 0, ): (((((0.5, 0.6, ), (0.5, 0.5, ), ), 0.5, ), (), ), 1, {}, ),
}
