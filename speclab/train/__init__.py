"""Training: the bundled pair, and drafters for a frozen target (python -m speclab train, whose command
line is speclab.cli.train).

    loop.py     the one resumable training loop every trainer runs: checkpoint, resume, deadline,
                Ctrl-C, periodic save, progress bar, learning-rate schedule (lr_at), evaluations
    data.py     what every trainer reads: tokenizer, encoded corpus, batches by (seed, step), the
                target's continuations, the frozen target's cached features, the machine's name
    pair.py     the bundled pair and drafts: Preset, train_pair, train_draft, install_pair
    medusa.py   Medusa heads: their loss, quick_medusa (chapter 7), train_medusa, choose_medusa_tree
    eagle.py    EAGLE-1 and EAGLE-3 heads: their losses, the unrolled training-time test, quick_eagle
                (chapter 8), train_eagle
    mtp.py      DeepSeek-V3-style MTP modules: train_mtp (EAGLE-3's trainer, one step deep)
    exit.py     layer-skip exit adapters: exit_logits, exit_agreement, train_exit
    tuning.py   EAGLE-2's settings for a trained head, chosen by timing them (choose_eagle_tree)
    install.py  copying a trained drafter's folder into the package, beside the bundled target

Trainers read each method's name, folder and train command from speclab.methods.REGISTRY.
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
