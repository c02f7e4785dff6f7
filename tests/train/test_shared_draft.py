"""train shared-draft: a draft for a chat target, distilled on the target's answers, resumable, installed
into the pair's folder where load_pair finds it, and greedy-exact there."""
import json

import pytest
import torch

import speclab
from speclab.cli.train import main as train_main
from speclab.shared_draft import DraftVocabHead
from tests.test_packaged import cached_smollm2  # noqa: F401 (the fixture)
from tests.train.test_chat_data import small_library  # noqa: F401 (the fixture)


@pytest.mark.usefixtures("small_library")
def test_micro_chat_draft_resumes_installs_into_the_pair_folder_and_decodes_exactly(cached_smollm2, tmp_path):
    _, pair = cached_smollm2
    out = tmp_path / "run"
    common = ["shared-draft", "--target", "smollm2", "--out", str(out), "--preset", "micro-chat", "--device", "cpu"]
    train_main([*common, "--steps", "2"])
    train_main([*common, "--steps", "4", "--install"])
    record = json.loads((out / "draft" / "record.json").read_text())
    assert [e["step"] for e in record["log"]["evals"]] == [0, 2, 4]
    assert record["draft_vocab"]["size"] == 16 and 0 < record["draft_vocab"]["heldout_coverage"] <= 1
    assert record["rows_spec"].startswith("chat: 8 conversations")
    target, draft, tok, _ = speclab.load_pair("smollm2", device="cpu")
    assert (pair.folder / "draft" / "shared_draft.json").exists() and isinstance(draft.lm_head, DraftVocabHead)
    ids = torch.tensor([3, 4, 5, 6])
    assert speclab.speculative_generate(target, draft, ids, k=3, max_new_tokens=10).tokens.tolist() == \
        speclab.generate(target, ids, max_new_tokens=10).tokens.tolist()


@pytest.mark.usefixtures("small_library")
def test_an_eagle3_head_of_the_same_preset_reuses_the_chat_features_and_drafts_exactly(cached_smollm2, tmp_path,
                                                                                     monkeypatch):
    from speclab.methods import shipped
    _, pair = cached_smollm2
    monkeypatch.setattr(shipped, "PAIRS_DIR", pair.folder.parent)  # load_drafter looks in the stand-in's pairs
    out = tmp_path / "run"
    train_main(["shared-draft", "--target", "smollm2", "--out", str(out), "--preset", "micro-chat", "--device", "cpu",
                "--install"])
    stamp = (out / "features.pt").stat().st_mtime_ns
    layers = torch.load(out / "features_layers.pt")  # written by the same single pass over the target
    train_main(["eagle3", "--target", "smollm2", "--out", str(out), "--preset", "micro-chat", "--device", "cpu",
                "--install"])
    assert (out / "features.pt").stat().st_mtime_ns == stamp and len(layers["layers"]) == 3
    record = json.loads((out / "eagle3" / "record.json").read_text())
    assert record["draft_vocab"]["size"] == 16 and record["log"]["rows"] == json.loads(
        (out / "draft" / "record.json").read_text())["training_rows"]
    # EAGLE-2's settings, timed on chat requests (a chat corpus) among the short candidates
    tree = json.loads((out / "eagle3" / "tree.json").read_text())
    assert tree["prompts"].startswith("1 chat requests") and tree["sampled"]["temperature"] == 1
    # drawn outside the conversations in --out
    assert "conversations the head's training drew from" in tree["prompts"] and tree["held_out"]
    assert len(tree["table"]) == len(speclab.train.tuning.EAGLE_SHORT_CANDIDATES)
    # and again on another machine (or other prompts), by its own command
    train_main(["eagle-tree", "--target", "smollm2", "--head", str(out / "eagle3"), "--prompts", "code",
                "--candidates", "short", "--num-prompts", "1", "--max-new-tokens", "4", "--repeats", "1",
                "--device", "cpu"])
    assert json.loads((out / "eagle3" / "tree.json").read_text())["prompts"] == "held-out code prompts 5-5"
    with pytest.raises(SystemExit, match="applies to --prompts chat"):
        train_main(["eagle-tree", "--target", "smollm2", "--head", str(out / "eagle3"), "--prompts", "code",
                    "--trained-on", str(out / "chat_conversations.pt")])
    target, _, _, _ = speclab.load_pair("smollm2", device="cpu")
    drafter = speclab.load_drafter("eagle3", target)  # found in the pair's folder by the target's fingerprint
    ids = torch.tensor([3, 4, 5, 6])
    assert speclab.speculative_generate(target, drafter, ids, k=3, max_new_tokens=10).tokens.tolist() == \
        speclab.generate(target, ids, max_new_tokens=10).tokens.tolist()
    # one bench run by task, then the pair's card from the records
    from speclab.cli.main import main as speclab_main
    bench = tmp_path / "bench.json"
    speclab_main(["bench", "--pair", "smollm2", "--workload", "chat-qa,chat-math", "--num-prompts", "1",
                  "--max-new-tokens", "6", "--device", "cpu", "--repeats", "1", "--layer-skip", "1", "--json", str(bench),
                  "--methods", "speclab target-only,speclab speculative,speclab eagle3,hf assisted"])
    lossless = tmp_path / "lossless.json"
    speclab_main(["evaluate", "--pair", "smollm2", "--workload", "chat-qa", "--prompt-numbers", "1", "--lossless", "4",
                  "--methods", "draft_model,eagle3", "--device", "cpu", "--json", str(lossless)])
    speclab_main(["card", "--pair", "smollm2", "--bench", str(bench), "--lossless", str(lossless)])
    card = (pair.folder / "MODEL_CARD.md").read_text()
    assert "### Distilled draft (`draft/`)" in card and "### EAGLE-3 head (`eagle3/`)" in card
    assert "| method | qa | math |" in card and "| distilled draft | " in card
    assert "## Sampling is lossless (lossless.json)" in card
    assert "| draft_model | 1 | 4 | " in card and "| eagle3 | 1 | 4 | " in card
