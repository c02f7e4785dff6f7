"""Expected values of the public checks of lab03: recorded by `python -m speclab labs build` from
labs/source/lab03.ipynb, by running each public case on the solutions with the instructor's references.

Do not edit. One entry per call of `lab.expected(name, ...)` in a public case: (question, case, name,
index) -> (a digest of the inputs, the value, what the reference wrote into its arguments).
"""
from speclab.checks import recorded_tensor as T

VALUES = {
    ('q2', 'the draft under-estimates the token (p > q): always accepted', 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 0, ), (), ), 1.0, {}, ),
    ('q2', 'the draft over-estimates the token (p < q): accepted with probability p / q', 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 0, ), (), ), 0.5, {}, ),
    ('q2', 'the target gives the token no mass: never accepted', 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 0, ), (), ), 0.0, {}, ),
    ('q2', 'the draft gave the token no mass but the target did: accepted', 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 2, ), (), ), 1.0, {}, ),
    ('q4', 'statistics: the number of accepted drafts, for fixed draft tokens', 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 0, ), (), ), 0.5, {}, ),
    ('q4', 'statistics: the number of accepted drafts, for fixed draft tokens', 'accept', 1, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 1, ), (), ), 0.5, {}, ),
    ('q5', 'top-k = 2: the raw softmax would give 0.857, the served distributions give 0.756', 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 1, ), (), ), 0.7563024244102461, {}, ),
    ('q5', "top-p removes the token from the target's served distribution: never accepted", 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 2, ), (), ), 0.0, {}, ),
    ('q5', 'temperature 0.5 changes both distributions', 'accept', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), ('tensor', 'torch.float32', (3, ), 1.0, ), 1, ), (), ), 0.23654529379088868, {}, ),
}
