"""Installing trained weights into a pair folder: refused when they serve another target than the folder's."""
import pytest

from speclab.methods.medusa import MedusaHeads
from speclab.train.install import install
from tests.conftest import tiny_model


def test_heads_for_another_target_never_replace_a_pair_folders_own(tmp_path):
    mine, other = tiny_model("llama", layers=2, seed=0), tiny_model("llama", layers=2, seed=7)
    package = tmp_path / "package"
    MedusaHeads.for_target(mine, num_heads=2).save(tmp_path / "first" / "medusa")
    assert install(tmp_path / "first", "medusa", package) == package / "medusa"  # an empty folder takes any
    installed = (package / "medusa" / "medusa_heads.safetensors").read_bytes()
    MedusaHeads.for_target(other, num_heads=2).save(tmp_path / "foreign" / "medusa")
    with pytest.raises(ValueError, match="trained for another target.*nothing was copied"):
        install(tmp_path / "foreign", "medusa", package)
    assert (package / "medusa" / "medusa_heads.safetensors").read_bytes() == installed
    MedusaHeads.for_target(mine, num_heads=3).save(tmp_path / "again" / "medusa")  # retrained for the same target
    install(tmp_path / "again", "medusa", package)
    assert MedusaHeads.load(package / "medusa").num_heads == 3
