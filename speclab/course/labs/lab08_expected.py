"""Expected values of the public checks of lab08: recorded by `python -m speclab labs build` from
labs/source/lab08.ipynb, by running each public case on the solutions with the instructor's references.

Do not edit. One entry per call of `lab.expected(name, ...)` in a public case: (question, case, name,
index) -> (a digest of the inputs, the value, what the reference wrote into its arguments).
"""
from speclab.checks import recorded_tensor as T

VALUES = {
    ('q1', 'a row of 4 tokens: pair t reads (f_t, x_{t+1})', 'pairs', 0, ): (((('tensor', 'torch.int64', (4, ), [7, 3, 9, 4], ), ('tensor', 'torch.float32', (4, 2, ), 14.0, ), ), (), ), (T('int64', (3,), [3, 9, 4]), T('float32', (3, 2), [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]), T('float32', (3, 2), [1.0, 1.5, 2.0, 2.5, 3.0, 3.5]), ), {}, ),
    ('q1', 'a row of 4 tokens: pair t must predict the next feature, f_{t+1}', 'pairs', 0, ): (((('tensor', 'torch.int64', (4, ), [7, 3, 9, 4], ), ('tensor', 'torch.float32', (4, 2, ), 14.0, ), ), (), ), (T('int64', (3,), [3, 9, 4]), T('float32', (3, 2), [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]), T('float32', (3, 2), [1.0, 1.5, 2.0, 2.5, 3.0, 3.5]), ), {}, ),
    ('q4', "a perfect prediction: the loss is 0.1 x the entropy of the target's distribution", 'loss', 0, ): (((('tensor', 'torch.float32', (2, 2, ), 3.0, ), ('tensor', 'torch.float32', (2, 2, ), 3.0, ), ('tensor', 'torch.float32', (3, 2, ), 4.0, ), ), (), ), T('float32', (), [0.09513694047927856]), {}, ),
    ('q4', "errors below 1: half their square, and the CE against the target's distribution", 'loss', 0, ): (((('tensor', 'torch.float32', (2, 2, ), 4.0, ), ('tensor', 'torch.float32', (2, 2, ), 3.0, ), ('tensor', 'torch.float32', (3, 2, ), 4.0, ), ), (), ), T('float32', (), [0.1645095944404602]), {}, ),
    ('q4', 'errors beyond 1: smooth L1 grows linearly there', 'loss', 0, ): (((('tensor', 'torch.float32', (2, 2, ), 8.5, ), ('tensor', 'torch.float32', (2, 2, ), 3.0, ), ('tensor', 'torch.float32', (3, 2, ), 4.0, ), ), (), ), T('float32', (), [2.0560483932495117]), {}, ),
    ('q4', "a 0-dim tensor whose gradient reaches predicted, as eagle_loss's does", 'loss_gradient', 0, ): (((('tensor', 'torch.float32', (5, 4, ), -6.39, ), ('tensor', 'torch.float32', (5, 4, ), -6.1, ), ('tensor', 'torch.float32', (7, 4, ), -2.58, ), ), (), ), T('float32', (5, 4), [-0.03268875554203987, 0.004298790358006954, -0.051023662090301514, 0.038864072412252426, 0.09373709559440613, -0.011908565647900105, 0.07225829362869263, -0.050283219665288925, 0.017526328563690186, 0.05098789930343628, 0.056031376123428345, 0.052609190344810486, 0.05240447446703911, -0.030643992125988007, 0.0004317229613661766, -0.07526620477437973, -0.05010072886943817, -0.05001450702548027, -0.028824742883443832, 0.05010571330785751]), {}, ),
}
