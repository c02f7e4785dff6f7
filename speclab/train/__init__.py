"""Training: the bundled pair, and drafters for a frozen target (`python -m speclab train`:
speclab.cli.train). loop.py is the one resumable loop every trainer runs (checkpoint, resume, deadline,
Ctrl-C, learning-rate schedule, evaluations) and data.py what every trainer reads (corpus, batches by
(seed, step), the target's continuations and cached features); one module per thing trained: pair.py
(the pair and drafts), medusa.py, eagle.py (EAGLE-1 and EAGLE-3, with the training-time test), mtp.py,
exit.py (layer-skip exit adapters), parallel_draft.py, shared_draft.py; tuning.py times EAGLE-2's
settings for a head; install.py copies a trained drafter beside its target; card.py writes the bundled
pair's model card. Trainers read each method's name, folder and train command from
speclab.methods.REGISTRY.
"""
from speclab.train.eagle import quick_eagle, train_eagle
from speclab.train.exit import train_exit
from speclab.train.install import install
from speclab.train.medusa import choose_medusa_tree, quick_medusa, train_medusa
from speclab.train.mtp import train_mtp
from speclab.train.pair import install_pair, train_draft, train_pair
from speclab.train.tuning import choose_eagle_tree

__all__ = ["choose_eagle_tree", "choose_medusa_tree", "install", "install_pair", "quick_eagle", "quick_medusa",
           "train_draft", "train_eagle", "train_exit", "train_medusa", "train_mtp", "train_pair"]
