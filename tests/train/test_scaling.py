"""train scale: the points of a data-scaling curve are the first N conversations of one stream, frozen, each
trained with the same steps per conversation, summed up in curve.json."""
import json
from types import SimpleNamespace

import pytest
import torch

import speclab.train.loop as loop
import speclab.train.scaling as scaling
from speclab.cli.train import main as train_main
from speclab.measure.workloads import CHAT, encode_chat, load_chats
from speclab.models import BUNDLED_DIR, CONVERTED_PAIRS, load_tokenizer
from speclab.packaged import ensure_converted
from speclab.train import chat_requests
from speclab.train.chat_requests import TUNING_CATEGORIES
from speclab.train.scaling import bench_argv, freeze_point, in_loop_acceptance, point_speeds, same_prompts
from speclab.train.varied_requests import held_out_requests
from tests.test_packaged import cached_smollm2  # noqa: F401 (the fixture)
from tests.train.test_chat_data import small_library  # noqa: F401 (the fixture)


@pytest.mark.usefixtures("small_library")
def test_points_are_nested_frozen_and_trained_at_the_same_steps_per_conversation(cached_smollm2, tmp_path, capsys,
                                                                                 monkeypatch):
    stream = tmp_path / "stream"  # 8 conversations the stand-in target answered (the micro-chat preset's)
    train_main(["shared-draft", "--target", "smollm2", "--out", str(stream), "--preset", "micro-chat",
                "--device", "cpu", "--steps", "1"])
    whole = torch.load(stream / "chat_conversations.pt")["conversations"]
    monkeypatch.setattr(scaling, "SAME_PROMPTS", 4)  # (32 for a real curve)
    monkeypatch.setattr(scaling, "BENCH_CHATS", 1)  # the first prompt of each chat workload (4 for a real curve)
    # what a GPU lent for minutes runs: the drafters trained, nothing decoded, no curve (the next call writes it)
    train_main(["scale", "--target", "smollm2", "--stream", str(stream), "--points", "4", "--preset", "micro-chat",
                "--device", "cpu", "--train-only"])
    assert "curve.json not written" in capsys.readouterr().out and not (stream / "curve.json").exists()
    assert (stream / "c4" / "eagle3" / "record.json").exists() and (stream / "c4" / "draft" / "record.json").exists()
    assert not (stream / "c4" / "same_prompts.json").exists()
    train_main(["scale", "--target", "smollm2", "--stream", str(stream), "--points", "4,8,16",
                "--preset", "micro-chat", "--device", "cpu"])
    assert "holds 8 conversations, not 16" in capsys.readouterr().out  # said aloud, not trained
    curve = json.loads((stream / "curve.json").read_text())
    assert [p["conversations"] for p in curve["points"]] == [4, 8] and curve["target"] == "smollm2"
    for point in curve["points"]:
        n = point["conversations"]
        kept = torch.load(stream / f"c{n}" / "chat_conversations.pt")["conversations"]
        assert len(kept) == n and all(torch.equal(a, b) for a, b in zip(kept, whole))  # the stream's first n
        assert point["head"]["steps"] == n // 2 and point["draft"]["steps"] == n // 2  # micro-chat: 4 steps / 8
        assert len(point["head"]["heldout_top1_by_step"]) >= 1 and 0 <= point["draft"]["heldout_top1"] <= 1
        assert f"--eagle3 {stream / f'c{n}' / 'eagle3'}" in point["bench"]
        answers = point["head"]["heldout_answer_top1_by_step"]  # on the answers' positions alone, as recorded
        assert len(answers) == len(point["head"]["heldout_top1_by_step"]) and 0 <= point["draft"]["heldout_answer_top1"] <= 1
    assert curve["points"][0]["tokens"] < curve["points"][1]["tokens"]
    answered = curve["answers"]  # how the stream was answered: the rate the generation ran at, batch by batch
    batches = torch.load(stream / "chat_conversations.pt")["batches"]
    assert answered["conversations"] == 8 and answered["batches_timed"] == len(batches) >= 1
    assert sum(t for t, _ in batches) == answered["answer_tokens"] > 0
    assert answered["median_batch_tokens_per_s"] > 0
    assert answered["kinds"] == [[torch.load(stream / "chat_conversations.pt")["requests"], 0]]  # one kind, from 0
    same = curve["same_prompts"]  # every point decoded the same requests, in the stream's two kinds of form
    assert set(same) == {"everyday forms", "varied forms", "hand-written prompts"}
    for kind in ("everyday forms", "varied forms"):
        assert same[kind]["about"].startswith(f"4 requests in the {kind}")
        assert same[kind]["about"].endswith("none in the stream's 8 conversations")
    assert same["hand-written prompts"]["about"].startswith("the chat workloads' 7 hand-written prompts (1 in each")
    assert [same[kind]["prompts"] for kind in same] == [4, 4, 7]
    assert same["everyday forms"]["categories"] == ["conversation", "math"] * 2  # each prompt's, in turn
    assert same["varied forms"]["categories"] == list(TUNING_CATEGORIES)
    assert same["hand-written prompts"]["categories"] == [w.removeprefix("chat-") for w in CHAT]
    assert all(set(same[kind]["points"]) == {"4", "8"} for kind in same)
    assert "(conversation, math)" in same["everyday forms"]["about"]
    assert len(same["varied forms"]["points"]["4"]["head"]["by_prompt"]) == 4  # (new tokens, rounds) of each
    assert curve["points"][0]["heldout"] == {"rows": 2, "seq_len": 16}  # micro-chat's
    assert all(1 <= same[kind]["points"][n][d]["tokens_per_round"] <= 5
               for kind in same for n in ("4", "8") for d in ("head", "draft"))
    kept = json.loads((stream / "c4" / "same_prompts.json").read_text())  # the prompts beside their scores
    assert set(kept) == set(same) and [len(kept[kind]["prompts"]) for kind in same] == [4, 4, 7]
    tok = load_tokenizer(str(ensure_converted(CONVERTED_PAIRS["smollm2"].packaged)))  # (the stand-in's words)
    drawn = {"everyday forms": chat_requests.held_out_requests(4, lambda text: False),
             "varied forms": held_out_requests(4, TUNING_CATEGORIES, lambda text: False)}
    assert all(kept[kind]["prompts"] == [encode_chat(tok, [{"role": "user", "content": r}]).tolist()
                                         for r in drawn[kind]] for kind in drawn)
    assert kept["hand-written prompts"]["prompts"] == [encode_chat(tok, c).tolist() for w in CHAT for c in load_chats(w, 1)]

    # a record from before the answers were scored in training gets them from the saved drafters: the same values
    target_dir = str(ensure_converted(CONVERTED_PAIRS["smollm2"].packaged))
    depth = len(curve["points"][0]["head"]["heldout_top1_by_step"])
    scored = scaling.score_answers(target_dir, stream / "c4", depth, "cpu")
    assert scored["head"] == pytest.approx(curve["points"][0]["head"]["heldout_answer_top1_by_step"], abs=1e-3)
    assert scored["draft"] == pytest.approx(curve["points"][0]["draft"]["heldout_answer_top1"], abs=1e-3)

    # again, with a bench: trained points are not trained again, each is timed once, and its speeds are summed up
    timed = []

    def bench(point):
        timed.append(point)
        rows = [bench_row("speclab target-only", 10, exact=None), bench_row("speclab eagle3", 15, 2.0)]
        (point / "bench.json").write_text(json.dumps({"workloads": [{"rows": rows}]}))

    def no_training(*args, **kwargs):
        raise AssertionError("a trained point was trained again")
    monkeypatch.setattr(scaling, "train_eagle", no_training)
    monkeypatch.setattr(scaling, "train_shared_draft", no_training)
    monkeypatch.setattr(scaling, "request_acceptance", no_training)  # scored on these requests already: kept
    curve = scaling.scale("smollm2", stream, [4, 8], "micro-chat", "cpu", bench=bench)
    assert timed == [stream / "c4", stream / "c8"]
    assert all(p["speeds"]["head"]["eager"]["speedup"] == 1.5 and p["speeds"]["exact"] for p in curve["points"])
    again = scaling.scale("smollm2", stream, [4], "micro-chat", "cpu", bench=bench)
    assert len(timed) == 2  # its bench.json is there
    assert [p["conversations"] for p in again["points"]] == [4, 8]  # the curve keeps the point this run left out
    # a point whose head's record names other steps is trained again, and what timed the old head goes
    (stream / "c4" / "eagle3" / "tree.json").write_text("{}")
    record = stream / "c4" / "eagle3" / "record.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "preset": {"steps": 99}}))
    with pytest.raises(AssertionError, match="trained again"):
        scaling.scale("smollm2", stream, [4], "micro-chat", "cpu", bench=bench)
    assert not (stream / "c4" / "bench.json").exists() and not (stream / "c4" / "eagle3" / "tree.json").exists()


def test_a_heads_speed_on_requests_of_its_trainings_kind_comes_from_its_held_out_tuning(tmp_path):
    def row(top_k, depth, total, speedup):
        return {"top_k": top_k, "depth": depth, "total_tokens": total, "min_confidence": None,
                "tokens_per_pass": depth / 2, "speedup": speedup}
    tree = {"prompts": "8 chat requests", "hardware": "a CPU", "held_out": True,
            "table": [row(1, 2, 2, 0.9), row(1, 4, 4, 1.3), row(2, 3, 6, 1.4)]}
    (tmp_path / "tree.json").write_text(json.dumps(tree))
    speeds = scaling.request_speeds(tmp_path)
    assert speeds["chain"] == {"speedup": 1.3, "tokens_per_pass": 2.0}  # the bench's chain, four deep
    assert speeds["best"]["speedup"] == 1.4 and speeds["best"]["setting"].startswith("top_k 2, depth 3")
    for trained_on in ({"held_out": False}, {"held_out": None}):  # timed on requests it trained on: no speed
        (tmp_path / "tree.json").write_text(json.dumps({**tree, **trained_on}))
        assert scaling.request_speeds(tmp_path) is None
    (tmp_path / "tree.json").unlink()
    assert scaling.request_speeds(tmp_path) is None


def test_a_point_past_the_stream_names_the_command_that_answers_more(tmp_path):
    with pytest.raises(ValueError, match="holds 0 conversations, not 5.*--packed"):  # a new machine: no stream yet
        freeze_point(tmp_path, 5)
    torch.save({"conversations": [torch.ones(3, dtype=torch.int32)] * 2, "seconds": 1.0, "requests": "everyday"},
               tmp_path / "chat_conversations.pt")
    with pytest.raises(ValueError, match="train answers --out .* --conversations 5"):
        freeze_point(tmp_path, 5)
    assert len(torch.load(freeze_point(tmp_path, 1) / "chat_conversations.pt")["conversations"]) == 1


def test_a_point_keeps_only_the_kinds_of_requests_its_conversations_hold(tmp_path):
    torch.save({"conversations": [torch.ones(3, dtype=torch.int32)] * 4, "seconds": 1.0, "requests": "everyday",
                "continued": [("varied", 2)]}, tmp_path / "chat_conversations.pt")
    assert torch.load(freeze_point(tmp_path, 2) / "chat_conversations.pt")["continued"] == []
    assert torch.load(freeze_point(tmp_path, 3) / "chat_conversations.pt")["continued"] == [("varied", 2)]


def bench_row(method: str, tokens_per_s: float, tokens_per_round: float = 1.0, exact=True, lengths=None) -> dict:
    """A bench row of 64 new tokens at `tokens_per_s`, in 64 / tokens_per_round rounds (accepted `lengths`:
    how many rounds accepted 0, 1, ... drafts; by default one count per row, so no two rows decoded alike)."""
    return {"method": method, "new_tokens": 64, "seconds": 64 / tokens_per_s, "matches_target_only": exact,
            "stats": {"rounds": 64 / tokens_per_round, "accepted_lengths": lengths or [len(method), tokens_per_s]}}


def test_rows_that_decoded_alike_are_one_setting_at_their_pooled_speed():
    """The bench's `speclab eagle3` (a head without tree.json drafts its chain) and `speclab eagle3 chain` decode
    alike: their faster timing would flatter the setting, so the two count once, 128 tokens over both seconds."""
    rows = [bench_row("speclab target-only", 10, exact=None), bench_row("speclab eagle3", 16, 2.0, lengths=[9, 9]),
            bench_row("speclab eagle3 chain", 12, 2.0, lengths=[9, 9]), bench_row("speclab eagle3 x", 13.5, 1.5)]
    head = point_speeds({"workloads": [{"rows": rows}]})["head"]["eager"]
    assert head == {"row": "speclab eagle3 chain", "same_as": ["speclab eagle3"], "tokens_per_round": 2.0,
                    "speedup": round(128 / (64 / 16 + 64 / 12) / 10, 3),  # 1.371: not 1.6, and above x's 1.35
                    "each": [1.6, 1.2]}  # the two timings, apart by more than the setting's lead


def test_a_points_speeds_are_each_drafters_fastest_row_over_target_only_on_the_same_path():
    rows = [bench_row("speclab target-only", 10, exact=None), bench_row("speclab draft_model", 12, 2.0),
            bench_row("speclab draft_model K=1", 13, 1.6), bench_row("speclab draft_model K=2", 11, 2.0),
            bench_row("speclab eagle3", 15, 2.5), bench_row("speclab eagle3 chain", 16, 2.0),
            bench_row("speclab target-only (fast)", 20),
            bench_row("speclab draft_model K=1 (fast)", 25, 1.6),
            bench_row("speclab eagle3 (fast)", 30, 2.5), bench_row("speclab eagle3 chain (fast)", 24, 2.0)]
    speeds = point_speeds({"workloads": [{"rows": rows}]})
    assert speeds["exact"] is True
    assert speeds["draft"] == {"eager": {"row": "speclab draft_model K=1", "speedup": 1.3, "tokens_per_round": 1.6},
                               "fast": {"row": "speclab draft_model K=1", "speedup": 1.25, "tokens_per_round": 1.6}}
    assert speeds["head"]["eager"]["row"] == "speclab eagle3 chain" and speeds["head"]["eager"]["speedup"] == 1.6
    assert speeds["head"]["fast"] == {"row": "speclab eagle3", "speedup": 1.5, "tokens_per_round": 2.5}
    rows[4]["matches_target_only"] = False  # one row that decoded other tokens: the point is not exact
    assert point_speeds({"workloads": [{"rows": rows}]})["exact"] is False
    assert point_speeds({"workloads": [{"rows": rows[:1]}]})["exact"] is None  # nothing compared: not "exact"


def test_a_points_speeds_name_the_host_they_were_timed_on():
    rows = [bench_row("speclab target-only", 10, exact=None), bench_row("speclab eagle3", 15, 2.5)]
    cpu = {"cpu": "Intel(R) Xeon(R) Processor (family 6, model 167)", "gpu": None, "threads": 2, "rows": rows}
    assert point_speeds({"workloads": [cpu]})["host"] == "Intel(R) Xeon(R) Processor (family 6, model 167), 2 CPU threads"
    assert point_speeds({"workloads": [{**cpu, "gpu": "NVIDIA H200"}]})["host"] == "NVIDIA H200"
    assert point_speeds({"workloads": [{"rows": rows}]})["host"] is None  # a record that names none


def test_a_points_speeds_add_up_every_workloads_tokens_and_seconds():
    """`--workload chat` is seven categories, each a summary with the same rows: a row's speed is its tokens over its
    seconds in all of them (the head at 30 then 10 tokens/s, 64 tokens each: 15 tokens/s), not the last one's."""
    first = [bench_row("speclab target-only", 10, exact=None), bench_row("speclab eagle3", 30, 3.0)]
    second = [bench_row("speclab target-only", 10, exact=None), bench_row("speclab eagle3", 10, 1.5)]
    head = point_speeds({"workloads": [{"rows": first}, {"rows": second}]})["head"]["eager"]
    assert head == {"row": "speclab eagle3", "speedup": 1.5, "tokens_per_round": 2.0}


def test_a_points_bench_command_is_one_the_bench_parses(tmp_path):
    from speclab.cli.bench import build_parser
    argv = bench_argv(tmp_path / "c1400", device="cpu")
    assert argv[0] == "bench"
    args = build_parser().parse_args(argv[1:])
    assert args.json == str(tmp_path / "c1400" / "bench.json") and args.fast == "static" and args.device == "cpu"
    assert args.draft == str(tmp_path / "c1400" / "draft")


def test_in_loop_acceptance_is_each_positions_share_of_the_rounds_that_reached_it_over_every_category():
    def chain(method: str, lengths: list[int]) -> dict:  # lengths[a]: rounds that kept a drafts of 4
        row = bench_row(method, 10)
        row["stats"].update(accepted_lengths=lengths, rounds=sum(lengths))
        row["new_tokens"] = sum(a * n for a, n in enumerate(lengths)) + sum(lengths)  # each round adds the target's
        return row
    first = [chain("speclab eagle3 chain", [6, 2, 1, 1, 0]), chain("speclab draft_model K=4", [8, 2, 0, 0, 0]),
             chain("speclab eagle3 chain (fast)", [0, 0, 0, 0, 10])]  # the fast path's rows are not read
    second = [chain("speclab eagle3 chain", [4, 2, 1, 0, 3]), chain("speclab draft_model K=4", [5, 5, 0, 0, 0])]
    sampled = {"temperature": 1.0, "rows": [chain("speclab eagle3 chain", [0, 0, 0, 0, 10])]}
    seen = in_loop_acceptance({"workloads": [{"temperature": 0.0, "rows": first}, {"rows": second}, sampled]})
    # the head: 20 rounds kept 0,1,2,3,4 drafts 10,4,2,1,3 times: 10 of 20 passed position 1, 6 of 10 position 2
    assert seen["head"]["by_position"] == [0.5, 0.6, 0.6667, 0.75]
    assert seen["head"]["tokens_per_round"] == round((0 * 10 + 1 * 4 + 2 * 2 + 3 + 4 * 3 + 20) / 20, 3)
    assert seen["head"]["rounds"] == 20
    assert seen["draft"]["by_position"] == [7 / 20, 0.0] and seen["draft"]["row"] == "speclab draft_model K=4"
    # a few categories' workloads alone (those the held-out requests have): the others' rounds are left out
    named = {"workloads": [{"workload": "chat-qa", "rows": first}, {"workload": "chat-rag", "rows": second}]}
    assert in_loop_acceptance(named, ("qa", "math"))["head"]["by_position"] == [0.4, 0.5, 0.5, 0.0]


def test_same_prompts_skip_a_request_any_conversation_of_the_stream_holds(tmp_path):
    tok = load_tokenizer(BUNDLED_DIR / "target")  # round-trips text; no chat template ("User:" lines)
    everyday, varied = chat_requests.held_out_requests(4, lambda t: False), held_out_requests(4, TUNING_CATEGORIES,
                                                                                             lambda t: False)
    held = [encode_chat(tok, [{"role": "user", "content": r}]).to(torch.int32) for r in (everyday[1], varied[2])]
    torch.save({"conversations": held}, tmp_path / "chat_conversations.pt")
    sets = same_prompts(tok, tmp_path, 4)
    assert len(sets["hand-written prompts"]["prompts"]) == 28  # every chat workload's prompts, held or not
    for kind, first in (("everyday forms", everyday), ("varied forms", varied)):
        ids = [p.tolist() for p in sets[kind]["prompts"]]
        assert len(ids) == 4 and ids[0] == encode_chat(tok, [{"role": "user", "content": first[0]}]).tolist()
        assert all(i not in ids for i in (h.tolist() for h in held))  # the requests the stream holds: skipped
        assert sets[kind]["about"].endswith("none in the stream's 2 conversations")


def test_a_point_whose_drafters_are_gone_keeps_its_scores_only_on_the_very_prompts_they_were_scored_on(
        tmp_path, monkeypatch):
    sets = {"varied forms": {"prompts": [torch.tensor([5, 6]), torch.tensor([7])], "categories": ["qa", "code"],
                             "about": "2 requests"}}
    monkeypatch.setattr(scaling, "same_prompts", lambda tokenizer, stream, drawn_against=None: sets)
    monkeypatch.setattr(scaling, "request_acceptance", lambda target, point, prompts, device=None:
                        {"head": {"tokens_per_round": 2.0}, "draft": {"tokens_per_round": 1.5}})
    for folder in ("draft", scaling.EAGLE[3].bundled):  # c8's drafters are here; c4's were lost with a machine
        (tmp_path / "c8" / folder).mkdir(parents=True)
        (tmp_path / "c8" / folder / "record.json").write_text("{}")
    target = str(BUNDLED_DIR / "target")
    fresh = scaling.score_same_prompts(target, tmp_path, [4, 8])
    assert set(fresh["varied forms"]["points"]) == {"8"}  # nothing to carry c4's scores from: left out
    mark = fresh["varied forms"]["fingerprint"]
    assert mark == scaling.prompts_fingerprint([[5, 6], [7]])
    recorded = {"head": {"tokens_per_round": 1.7}, "draft": {"tokens_per_round": 1.4}}
    earlier = {"varied forms": {"fingerprint": mark, "prompts": 2, "points": {"4": recorded}}}
    carried = scaling.score_same_prompts(target, tmp_path, [4, 8], earlier=earlier)
    assert carried["varied forms"]["points"]["4"] == recorded and "8" in carried["varied forms"]["points"]
    other = {"varied forms": {"fingerprint": scaling.prompts_fingerprint([[5, 6], [8]]), "prompts": 2,
                              "points": {"4": recorded}}}
    assert "4" not in scaling.score_same_prompts(target, tmp_path, [4, 8], earlier=other)["varied forms"]["points"]


def test_prompts_drawn_against_fewer_conversations_than_the_stream_holds_are_those_drawn_then(tmp_path):
    tok = load_tokenizer(BUNDLED_DIR / "target")
    varied = held_out_requests(3, TUNING_CATEGORIES, lambda t: False)
    later = encode_chat(tok, [{"role": "user", "content": varied[0]}]).to(torch.int32)
    torch.save({"conversations": [torch.tensor([5, 6], dtype=torch.int32), later]}, tmp_path / "chat_conversations.pt")
    then, now = same_prompts(tok, tmp_path, 3, drawn_against=1), same_prompts(tok, tmp_path, 3)
    assert then["varied forms"]["requests"] == varied and varied[0] not in now["varied forms"]["requests"]
    assert then["varied forms"]["about"].endswith("none in the first 1 of the stream's conversations")
    assert scaling.trained_on(tok, tmp_path, varied, 2) == [0] and scaling.trained_on(tok, tmp_path, varied, 1) == []
    with pytest.raises(ValueError, match="answer more first"):
        same_prompts(tok, tmp_path, 3, drawn_against=3)


def test_a_growing_curve_scores_every_point_on_the_drawn_prompts_its_largest_point_never_trained_on(
        tmp_path, monkeypatch):
    tok = load_tokenizer(BUNDLED_DIR / "target")
    requests = ["Name three rivers.", "What causes fog?", "Sort these words."]
    torch.save({"conversations": [encode_chat(tok, [{"role": "user", "content": t}]).to(torch.int32)
                                  for t in ("Hello there.", requests[1])]}, tmp_path / "chat_conversations.pt")
    drawn = []
    sets = {"varied forms": {"prompts": [torch.tensor([i]) for i in (5, 6, 7)], "categories": ["qa", "math", "code"],
                             "about": "3 requests", "requests": requests, "drawn_against": 1}}
    monkeypatch.setattr(scaling, "same_prompts", lambda tokenizer, stream, drawn_against=None:
                        drawn.append(drawn_against) or sets)
    monkeypatch.setattr(scaling, "request_acceptance", lambda target, point, prompts, device=None:
                        {d: {"tokens_per_round": 1.5, "by_prompt": [[6, 3], [8, 2], [4, 4]]} for d in ("head", "draft")})
    for folder in ("draft", scaling.EAGLE[3].bundled):  # c2's drafters are here; c1's were lost with a machine
        (tmp_path / "c2" / folder).mkdir(parents=True)
        (tmp_path / "c2" / folder / "record.json").write_text("{}")
    recorded = {d: {"tokens_per_round": 1.545, "by_prompt": [[5, 5], [9, 3], [3, 3]]} for d in ("head", "draft")}
    earlier = {"varied forms": {"fingerprint": scaling.prompts_fingerprint([[5], [6], [7]]), "prompts": 3,
                                "drawn_against": 1, "dropped": [], "points": {"1": recorded}}}
    grown = scaling.score_same_prompts(str(BUNDLED_DIR / "target"), tmp_path, [1, 2], earlier=earlier)["varied forms"]
    assert drawn == [1]  # drawn against as many conversations as the record's sets were
    assert grown["dropped"] == [1] and grown["prompts"] == 2 and grown["categories"] == ["qa", "code"]
    assert "1 dropped, which the first 2 conversations hold" in grown["about"]
    assert grown["points"]["1"]["head"] == {"tokens_per_round": 1.0, "by_prompt": [[5, 5], [3, 3]]}
    assert grown["points"]["2"]["draft"] == {"tokens_per_round": round(10 / 7, 3), "by_prompt": [[6, 3], [4, 4]]}
    again = scaling.score_same_prompts(str(BUNDLED_DIR / "target"), tmp_path, [1, 2], earlier={"varied forms": grown})
    assert again["varied forms"]["points"]["1"] == grown["points"]["1"]  # carried as it stands a second time


def test_one_time_budget_covers_both_trainers_of_a_point(tmp_path, monkeypatch):
    # the draft gets what the head left: a GPU lent for minutes must not run the head's minutes twice
    clock = [1000.0]
    monkeypatch.setattr(loop, "time", SimpleNamespace(time=lambda: clock[0]))
    given = {}

    def head(*args, stop_after_minutes=None, **kwargs):
        given["head"] = stop_after_minutes
        clock[0] += 180  # the head trains for 3 minutes

    monkeypatch.setattr(scaling, "train_eagle", head)
    monkeypatch.setattr(scaling, "train_shared_draft",
                        lambda *args, stop_after_minutes=None, **kwargs: given.update(draft=stop_after_minutes))
    monkeypatch.setattr(scaling, "freeze_point", lambda stream, n: tmp_path)
    monkeypatch.setattr(scaling, "_answers_scored", lambda point: True)
    monkeypatch.setattr(scaling, "point_summary", lambda point, pair: {})
    scaling.train_point("target", tmp_path, 8, "micro-chat", stop_after_minutes=5)
    assert given == {"head": 5.0, "draft": 2.0}
    clock[0] = 1000.0
    scaling.train_point("target", tmp_path, 8, "micro-chat", stop_after_minutes=2)  # the head spends it all
    assert given["head"] == 2.0 and 0 < given["draft"] < 0.01  # a moment: stop at once, not "no limit"
    scaling.train_point("target", tmp_path, 8, "micro-chat")
    assert given == {"head": None, "draft": None}



def test_a_point_is_tuned_on_varied_requests_that_none_of_the_streams_conversations_holds(tmp_path, monkeypatch):
    """By 14,000 conversations the everyday forms' qa and code requests are used up: `train scale --bench`
    tunes every point on the varied forms, outside the whole stream (each point's conversations are its first)."""
    import speclab.cli.train as cli
    calls = {}
    monkeypatch.setattr(cli, "choose_tree", lambda target, head, device, **tuning: calls.update(tuning))
    monkeypatch.setattr(cli, "speclab_main", lambda argv: calls.update(argv=argv))
    (tmp_path / "c4" / "eagle3").mkdir(parents=True)
    args = SimpleNamespace(target="smollm2", pair="smollm2", device="cpu", preset="smollm2-everyday", stream=tmp_path)
    cli.time_point(args, tmp_path / "c4")
    assert calls["prompts"] == "varied" and calls["training"] == tmp_path / "chat_conversations.pt"
    assert calls["argv"] == bench_argv(tmp_path / "c4", "smollm2", "cpu")
    calls.clear()
    (tmp_path / "c4" / "eagle3" / "tree.json").write_text("{}")  # tuned already: only the bench runs
    cli.time_point(args, tmp_path / "c4")
    assert list(calls) == ["argv"]
