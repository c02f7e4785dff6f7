"""Expected values of the public checks of lab07: recorded by `python -m speclab labs build` from
labs/source/lab07.ipynb, by running each public case on the solutions with the instructor's references.

Do not edit. One entry per call of `lab.expected(name, ...)` in a public case: (question, case, name,
index) -> (a digest of the inputs, the value, what the reference wrote into its arguments).
"""
from speclab.checks import recorded_tensor as T

VALUES = {
    ('q3', 'a chain the target agrees with everywhere: all accepted, the bonus from the last row', 'greedy', 0, ): ((((7, 3, 9, ), (-1, 0, 1, ), (7, 3, 9, 4, ), ), (), ), ([0, 1, 2], 4, ), {}, ),
    ('q3', 'no child of the root matches: empty path, the correction is target_argmax[0]', 'greedy', 0, ): ((((5, 6, 1, 2, ), (-1, -1, 0, 1, ), (8, 1, 2, 3, 4, ), ), (), ), ([], 8, ), {}, ),
    ('q3', 'the first child misses, its sibling matches: the walk goes on under the sibling', 'greedy', 0, ): ((((5, 6, 2, 3, 4, 8, ), (-1, -1, 0, 0, 1, 2, ), (6, 2, 4, 0, 0, 4, 0, ), ), (), ), ([1, 4], 4, ), {}, ),
    ('q3', 'a node whose parent was not accepted is never on the path', 'greedy', 0, ): ((((5, 6, 7, ), (-1, -1, 0, ), (7, 1, 7, 3, ), ), (), ), ([], 7, ), {}, ),
    ('q3', 'a node whose parent was not accepted is never on the path', 'greedy', 1, ): ((((5, 6, 7, 9, ), (-1, -1, 0, 1, ), (6, 7, 0, 1, 2, ), ), (), ), ([1], 0, ), {}, ),
    ('q3', 'two siblings carry the same token: the first in index order is taken', 'greedy', 0, ): ((((4, 4, 1, 2, ), (-1, -1, 0, 1, ), (4, 1, 3, 2, 0, ), ), (), ), ([0, 2], 2, ), {}, ),
    ('q3', 'two siblings carry the same token: the first in index order is taken', 'greedy', 1, ): ((((4, 4, 1, 2, ), (-1, -1, 0, 1, ), (4, 2, 3, 2, 0, ), ), (), ), ([0], 2, ), {}, ),
    ('q3', 'tokens and target_argmax as lists rather than tensors: the same walk', 'greedy', 0, ): ((((5, 6, 2, 3, 4, 8, ), (-1, -1, 0, 0, 1, 2, ), (6, 2, 4, 0, 0, 4, 0, ), ), (), ), ([1, 4], 4, ), {}, ),
    ('q4', 'one child the target likes more than the draft: accepted', 'node', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (0, ), ('tensor', 'torch.float32', (1, 3, ), 1.0, ), ('tensor', 'torch.float32', (1, ), 0.95, ), ), (), ), (0, None, ), {}, ),
    ('q4', 'after a rejection the next sibling is tested against the residual, not against p', 'node', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (1, 0, ), ('tensor', 'torch.float32', (2, 3, ), 2.0, ), ('tensor', 'torch.float32', (2, ), 1.2, ), ), (), ), (None, T('float32', (3,), [0.0, 0.0, 1.0]), ), {}, ),
    ('q4', 'after a rejection the next sibling is tested against the residual, not against p', 'node', 1, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (1, 0, 2, ), ('tensor', 'torch.float32', (3, 3, ), 3.0, ), ('tensor', 'torch.float32', (3, ), 2.19, ), ), (), ), (2, None, ), {}, ),
    ('q4', 'top-k candidates (qs = None): point masses, a rejection removes the token from p', 'node', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (0, 1, ), None, ('tensor', 'torch.float32', (2, ), 1.1, ), ), (), ), (1, None, ), {}, ),
    ('q4', 'top-k candidates (qs = None): point masses, a rejection removes the token from p', 'node', 1, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (0, 1, ), None, ('tensor', 'torch.float32', (2, ), 1.3, ), ), (), ), (None, T('float32', (3,), [0.0, 0.0, 1.0]), ), {}, ),
    ('q4', 'siblings drawn without replacement: child i is tested against its own row of qs', 'node', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (1, 2, ), ('tensor', 'torch.float32', (2, 3, ), 2.0, ), ('tensor', 'torch.float32', (2, ), 1.1, ), ), (), ), (None, T('float32', (3,), [1.0, 0.0, 0.0]), ), {}, ),
    ('q4', 'a child the target gives no mass is never accepted, even at u = 0', 'node', 0, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (0, 0, ), ('tensor', 'torch.float32', (2, 3, ), 2.0, ), ('tensor', 'torch.float32', (2, ), 0.0, ), ), (), ), (None, T('float32', (3,), [0.0, 0.5, 0.5]), ), {}, ),
    ('q4', 'a child the target gives no mass is never accepted, even at u = 0', 'node', 1, ): (((('tensor', 'torch.float32', (3, ), 1.0, ), (0, ), None, ('tensor', 'torch.float32', (1, ), 0.0, ), ), (), ), (None, T('float32', (3,), [0.0, 0.5, 0.5]), ), {}, ),
}
