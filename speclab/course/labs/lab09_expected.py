"""Expected values of the public checks of lab09: recorded by `python -m speclab labs build` from
labs/source/lab09.ipynb, by running each public case on the solutions with the instructor's references.

Do not edit. One entry per call of `lab.expected(name, ...)` in a public case: (question, case, name,
index) -> (a digest of the inputs, the value, what the reference wrote into its arguments).
"""
from speclab.checks import recorded_tensor as T

VALUES = {
    ('q1', 'every drafted token accepted: 2 more next round', 'next_k', 0, ): (((3, 3, 3, 8, ), (), ), 5, {}, ),
    ('q1', 'every drafted token accepted: 2 more next round', 'next_k', 1, ): (((1, 1, 1, 8, ), (), ), 3, {}, ),
    ('q1', 'a rejection: 1 fewer next round', 'next_k', 0, ): (((5, 5, 2, 8, ), (), ), 4, {}, ),
    ('q1', 'a rejection: 1 fewer next round', 'next_k', 1, ): (((4, 4, 0, 8, ), (), ), 3, {}, ),
    ('q1', 'capped at k_max', 'next_k', 0, ): (((6, 6, 6, 6, ), (), ), 6, {}, ),
    ('q1', 'capped at k_max', 'next_k', 1, ): (((5, 5, 5, 6, ), (), ), 6, {}, ),
    ('q1', 'never below 1', 'next_k', 0, ): (((1, 1, 0, 6, ), (), ), 1, {}, ),
    ('q1', 'fewer drafted than K (a confidence stop), all of them accepted: 2 more', 'next_k', 0, ): (((5, 2, 2, 8, ), (), ), 7, {}, ),
    ('q1', 'nothing drafted: K stays as it is', 'next_k', 0, ): (((4, 0, 0, 6, ), (), ), 4, {}, ),
    ('q1', 'nothing drafted: K stays as it is', 'next_k', 1, ): (((1, 0, 0, 6, ), (), ), 1, {}, ),
    ('q1', 'nothing drafted: K stays as it is', 'next_k', 2, ): (((6, 0, 0, 6, ), (), ), 6, {}, ),
    ('q2', 'greedy: the unsure token is still proposed, then the round stops', 'round', 0, ): ((('ScriptedDraft', 4, 0.4, 0.0, None, ), (), ), [3, 1], {}, ),
    ('q2', 'greedy: the confidence is the softmax of the raw logits, not the one-hot served distribution', 'round', 0, ): ((('ScriptedDraft', 3, 0.4, 0.0, None, ), (), ), [2], {}, ),
    ('q2', 'the draft runs once per drafted token, and not again after the stop', 'round', 0, ): ((('ScriptedDraft', 5, 0.5, 0.0, None, ), (), ), [1, 4], {}, ),
    ('q2', 'the draft runs once per drafted token, and not again after the stop', 'round', 1, ): ((('ScriptedDraft', 3, 0.5, 0.0, None, ), (), ), [1, 4, 0], {}, ),
    ('q2', 'no threshold (None): k tokens, however unsure', 'round', 0, ): ((('ScriptedDraft', 3, None, 0.0, None, ), (), ), [5, 0, 3], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 0, ): ((('ScriptedDraft', 4, 0.4, 0.6, 'Generator', ), (), ), [5, 3], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 1, ): ((('ScriptedDraft', 4, 0.4, 0.6, 'Generator', ), (), ), [0, 2], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 2, ): ((('ScriptedDraft', 4, 0.4, 0.6, 'Generator', ), (), ), [4, 0], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 3, ): ((('ScriptedDraft', 4, 0.4, 0.6, 'Generator', ), (), ), [0, 2], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 4, ): ((('ScriptedDraft', 4, 0.4, 1.5, 'Generator', ), (), ), [5, 3, 2], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 5, ): ((('ScriptedDraft', 4, 0.4, 1.5, 'Generator', ), (), ), [0, 1, 0], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 6, ): ((('ScriptedDraft', 4, 0.4, 1.5, 'Generator', ), (), ), [5, 0, 4], {}, ),
    ('q2', 'sampling at temperatures 0.6 and 1.5: tokens drawn from the served distribution, the stop reads the raw logits', 'round', 7, ): ((('ScriptedDraft', 4, 0.4, 1.5, 'Generator', ), (), ), [0, 1, 4], {}, ),
    ('q2', 'a confidence exactly at the threshold goes on: only below it stops', 'round', 0, ): ((('ScriptedDraft', 3, 0.5, 0.0, None, ), (), ), [0, 0, 0], {}, ),
    ('q2', 'a confidence exactly at the threshold goes on: only below it stops', 'round', 1, ): ((('ScriptedDraft', 2, 0.25, 0.0, None, ), (), ), [0, 1], {}, ),
    ('q3', 'the record with adapters, K = 2: the cheap shallow exit beats the most accurate one', 'exit', 0, ): (((((2, 0.3147, ), (4, 0.3593, ), (6, 0.4043, ), (8, 0.4388, ), (10, 0.4655, ), (12, 0.4968, ), (14, 0.5402, ), (16, 0.6992, ), (18, 0.7465, ), (20, 0.7783, ), (22, 0.8953, ), ), ((2, 0.143333, ), (4, 0.226667, ), (6, 0.31, ), (8, 0.393333, ), (10, 0.476667, ), (12, 0.56, ), (14, 0.643333, ), (16, 0.726667, ), (18, 0.81, ), (20, 0.893333, ), (22, 0.976667, ), ), 2, 1.0, ), (), ), 2, {}, ),
    ('q3', 'a target whose middle layers already agree: a middle exit wins', 'exit', 0, ): (((((4, 0.3, ), (8, 0.45, ), (12, 0.78, ), (16, 0.82, ), (20, 0.88, ), ), ((4, 0.1867, ), (8, 0.3533, ), (12, 0.52, ), (16, 0.6867, ), (20, 0.8533, ), ), 2, 1.0, ), (), ), 12, {}, ),
    ('q3', "the verify pass's cost moves the choice: the record at K = 4, verify_cost 1 and 1.4", 'exit', 0, ): (((((2, 0.3147, ), (4, 0.3593, ), (6, 0.4043, ), (8, 0.4388, ), (10, 0.4655, ), (12, 0.4968, ), (14, 0.5402, ), (16, 0.6992, ), (18, 0.7465, ), (20, 0.7783, ), (22, 0.8953, ), ), ((2, 0.143333, ), (4, 0.226667, ), (6, 0.31, ), (8, 0.393333, ), (10, 0.476667, ), (12, 0.56, ), (14, 0.643333, ), (16, 0.726667, ), (18, 0.81, ), (20, 0.893333, ), (22, 0.976667, ), ), 4, 1.0, ), (), ), 2, {}, ),
    ('q3', "the verify pass's cost moves the choice: the record at K = 4, verify_cost 1 and 1.4", 'exit', 1, ): (((((2, 0.3147, ), (4, 0.3593, ), (6, 0.4043, ), (8, 0.4388, ), (10, 0.4655, ), (12, 0.4968, ), (14, 0.5402, ), (16, 0.6992, ), (18, 0.7465, ), (20, 0.7783, ), (22, 0.8953, ), ), ((2, 0.143333, ), (4, 0.226667, ), (6, 0.31, ), (8, 0.393333, ), (10, 0.476667, ), (12, 0.56, ), (14, 0.643333, ), (16, 0.726667, ), (18, 0.81, ), (20, 0.893333, ), (22, 0.976667, ), ), 4, 1.4, ), (), ), 22, {}, ),
    ('q3', 'a tie: the smaller exit layer wins, whatever the order of the keys', 'exit', 0, ): (((((18, 0.3, ), (12, 0.6, ), (6, 0.6, ), ), ((18, 0.3, ), (12, 0.3, ), (6, 0.3, ), ), 2, 1.0, ), (), ), 6, {}, ),
}
