"""load_drafter finds the weights shipped for whichever target it is given, by the fingerprint they record."""
import copy

import pytest

from speclab.methods import REGISTRY, load_drafter, shipped, shipped_weights
from speclab.methods.draft_model import ModelDrafter
from speclab.methods.layer_skip import LayerSkipDrafter
from speclab.methods.medusa import MedusaDrafter, MedusaHeads
from speclab.models import BUNDLED_DIR, load_pair
from tests.conftest import tiny_model


@pytest.fixture()
def two_pairs(monkeypatch, tmp_path):
    """Pair folders 'a' and 'b', each with Medusa heads trained for its own tiny target (same shape)."""
    targets = {name: tiny_model("llama", layers=2, seed=seed) for name, seed in (("a", 0), ("b", 7))}
    for name, target in targets.items():
        MedusaHeads.for_target(target, num_heads=2).save(tmp_path / name / "medusa")
    monkeypatch.setattr(shipped, "PAIRS_DIR", tmp_path)
    return tmp_path, targets


def test_each_target_gets_the_heads_trained_for_it(two_pairs):
    root, targets = two_pairs
    for name, target in targets.items():
        assert shipped.find_shipped("medusa", target) == root / name / "medusa"
        drafter = load_drafter("medusa", target)
        assert isinstance(drafter, MedusaDrafter) and drafter.heads.num_heads == 2
    assert shipped.find_shipped("eagle", targets["a"]) is None  # no pair ships an EAGLE head here
    # the same target in half precision is still the same target (its checksum moves within rounding)
    assert shipped.find_shipped("medusa", copy.deepcopy(targets["b"]).half()) == root / "b" / "medusa"


def test_a_target_nothing_was_trained_for_gets_the_command_that_trains_it(two_pairs):
    stranger = tiny_model("llama", layers=3, seed=3)
    stranger.name_or_path = "/models/stranger"  # what from_pretrained records: the message names it
    assert shipped.find_shipped("medusa", stranger) is None
    with pytest.raises(FileNotFoundError, match="train medusa --target /models/stranger --out runs/medusa.*"
                                                "heads='runs/medusa/medusa'"):
        load_drafter("medusa", stranger)
    for name in ("eagle", "eagle3", "mtp", "draft_model"):
        with pytest.raises(FileNotFoundError, match=f"train {REGISTRY[name].train} --target"):
            load_drafter(name, stranger)
    with pytest.raises(ValueError, match="train exit --target /models/stranger"):
        load_drafter("layer_skip", stranger, exit_layer=1, adapter=True)
    # the methods that need no trained weights work on any target
    assert isinstance(load_drafter("layer_skip", stranger, exit_layer=1), LayerSkipDrafter)
    assert load_drafter("ngram", stranger) is not None and load_drafter("lookahead", stranger) is not None


def test_a_folder_that_records_no_fingerprint_is_not_taken_for_anyones(tmp_path):
    (tmp_path / "x" / "medusa").mkdir(parents=True)
    (tmp_path / "x" / "medusa" / "notes.json").write_text('{"about": "no fingerprint here"}')
    assert shipped.recorded_fingerprint(tmp_path / "x" / "medusa") is None
    assert shipped.find_shipped("medusa", tiny_model("llama"), tmp_path) is None


def test_every_folder_shipped_beside_the_bundled_target_is_found_for_it():
    target = load_pair(device="cpu").target
    for name, method in REGISTRY.items():
        if method.bundled:
            assert shipped_weights(name, target) == BUNDLED_DIR / method.bundled, name
    assert isinstance(load_drafter("draft_model", target), ModelDrafter)  # by draft/target_fingerprint.json
