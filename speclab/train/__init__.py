from speclab.train.legacy import *  # noqa: F401,F403  (temporary, while train/ is being split)
from speclab.train.legacy import main  # noqa: F401
