"""Expected values of the public checks of lab02: recorded by `python -m speclab labs build` from
labs/source/lab02.ipynb, by running each public case on the solutions with the instructor's references.

Do not edit. One entry per call of `lab.expected(name, ...)` in a public case: (question, case, name,
index) -> (a digest of the inputs, the value, what the reference wrote into its arguments).
"""
from speclab.checks import recorded_tensor as T

VALUES = {
    ('q1', 'all K drafts match: all K are accepted', 'greedy_round', 0, ): (((('tensor', 'torch.float32', (5, 64, ), 50.0, ), ('tensor', 'torch.int64', (4, ), [5, 9, 2, 7], ), ), (), ), (4, [5, 9, 2, 7, 1], ), {}, ),
    ('q1', 'the first draft differs: none is accepted', 'greedy_round', 0, ): (((('tensor', 'torch.float32', (5, 64, ), 50.0, ), ('tensor', 'torch.int64', (4, ), [5, 9, 2, 7], ), ), (), ), (0, [4], ), {}, ),
    ('q1', 'a mismatch in the middle: drafts after it do not count, even where they match', 'greedy_round', 0, ): (((('tensor', 'torch.float32', (5, 64, ), 50.0, ), ('tensor', 'torch.int64', (4, ), [5, 9, 2, 7], ), ), (), ), (2, [5, 9, 3], ), {}, ),
    ('q2', 'all drafts accepted: the K drafts, then the bonus token from the last row', 'greedy_round', 0, ): (((('tensor', 'torch.float32', (5, 16, ), 30.44, ), ('tensor', 'torch.int64', (4, ), [3, 1, 4, 1], ), ), (), ), (4, [3, 1, 4, 1, 5], ), {}, ),
    ('q2', "first draft rejected: only the target's own token from row 0", 'greedy_round', 0, ): (((('tensor', 'torch.float32', (5, 16, ), 30.44, ), ('tensor', 'torch.int64', (4, ), [2, 1, 4, 1], ), ), (), ), (0, [3], ), {}, ),
    ('q2', 'rejection at position 2: two drafts, then the correction from row 2', 'greedy_round', 0, ): (((('tensor', 'torch.float32', (5, 16, ), 30.44, ), ('tensor', 'torch.int64', (4, ), [3, 1, 9, 1], ), ), (), ), (2, [3, 1, 4], ), {}, ),
}
