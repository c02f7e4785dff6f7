"""`speclab.serving.checkpoints`: the same module as speclab.methods.checkpoints (heads in the layouts
the serving engines load), not a copy; it lives beside the heads it reads so that the registry can read it
without importing the serving package."""
import sys

from speclab.methods import checkpoints

sys.modules[__name__] = checkpoints
