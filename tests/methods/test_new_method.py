"""A new method is its module and its registry entry: a toy method (it drafts the last token repeated),
registered for these tests only, runs everywhere speclab runs a method with nothing else edited: loaded
by name, in the decode loop, `python -m speclab generate --method`, a bench row (the plan, `python -m
speclab bench --methods`), its engine settings or the reason an engine has none, and its section of the
model card; and it is gone after. Given weights (Method.weights_flag), it gets its command-line flag too;
given a setting of its own (Method.flags), generate's flag for it; and given a sweep in its module (Sweep, named
by its BenchRow), the bench's flag and a row per value."""
from __future__ import annotations

from dataclasses import replace
import json

import pytest
import torch

from speclab.cli.main import main
from speclab.decoding import generate, speculative_generate
from speclab.drafting import Draft, Drafter
from speclab.measure import bench
from speclab.methods import REGISTRY, BenchRow, CardSection, Flag, Method, bench_row, load_drafter
from speclab.methods.flags import Setting, Sweep, named
from speclab.methods.engines import Options, Unsupported, no
from speclab.sampling import SamplingParams
from speclab.serving import settings

NAME = "repeat_last"
ROW = bench_row(NAME)  # "speclab repeat_last"
FOLDER = "repeat"  # where its (pretend) weights ship in a pair's folder: the card's --only name
HEADING = "## Repeat-last drafting"


class RepeatLast(Drafter):
    """Drafts the sequence's last token k times: right wherever the text repeats a token."""

    name = NAME
    batched = True  # no state between rounds

    def __init__(self, table=None, times: int | None = None):
        self.table = table  # its (pretend) weights' directory, when the entry says it has weights
        self.times = times  # a setting of its own, when the entry declares a flag for it

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        return Draft(ids[-1:].repeat(k))


def engine_settings(engine: str, o: Options) -> dict:
    if engine == "speclab":
        return {"method": NAME, "k": o.k}
    raise no(engine, "no drafter that repeats the last token")


def card_section(pair_dir, num_prompts: int = 4, max_new_tokens: int = 128, method: Method | None = None) -> str:
    return f"{HEADING}\n\n{method.name} drafts the last token {num_prompts} x {max_new_tokens}.\n"


ENTRY = Method(NAME, lambda target, **options: RepeatLast(**options), options="none", bundled=FOLDER,
               engine_settings=engine_settings, one_hot_drafts=True, rows=(BenchRow(),),
               card=CardSection(card_section))


@pytest.fixture()
def toy(monkeypatch):
    """The toy method in the registry, for this test only (monkeypatch removes it after)."""
    monkeypatch.setitem(REGISTRY, NAME, ENTRY)
    yield ENTRY
    monkeypatch.undo()
    assert NAME not in REGISTRY and ROW not in bench.bench_methods()


def test_the_toy_method_loads_by_name_and_decodes_as_the_target_does(toy, pair, prompt):
    target, _ = pair
    drafter = load_drafter(NAME, target)
    assert isinstance(drafter, RepeatLast)
    result = speculative_generate(target, drafter, prompt, k=3, max_new_tokens=12)
    assert result.tokens.tolist() == generate(target, prompt, max_new_tokens=12).tokens.tolist()
    assert result.stats.drafted > 0


def test_the_toy_method_is_a_bench_row(toy, pair, prompt):
    assert ROW in bench.bench_methods()
    (row,) = bench.plan((ROW,), bench.Settings(k=3))
    assert (row.label, row.engine, row.method, row.k, dict(row.load)) == (ROW, "speclab", NAME, 3, {})
    rows = bench.run_bench(*pair, [prompt], k=3, max_new_tokens=8, methods=(bench.TARGET_ONLY, ROW), warmup=False,
                           block=True)
    assert [r.method for r in rows] == [bench.TARGET_ONLY, ROW, ROW + bench.BLOCK]  # it drafts chains of batches
    assert all(r.matches_target_only for r in rows[1:]) and rows[1].stats.drafted > 0


def test_the_toy_methods_engine_settings_or_why_an_engine_has_none(toy):
    """Through serving's one entry point, as `export --table` and chapter 12 ask for every method's."""
    assert settings.engine_settings(NAME, "speclab", Options(k=3)).settings == {"method": NAME, "k": 3}
    with pytest.raises(Unsupported, match="vllm: no drafter that repeats the last token"):
        settings.engine_settings(NAME, "vllm", Options())
    assert NAME in [row["method"] for row in settings.mapping_table({NAME: Options()})]


def test_generate_and_bench_run_the_toy_method(toy, capsys):
    """The commands on the bundled pair, in this process."""
    main(["generate", "def f(x):", "--method", NAME, "--max-new-tokens", "4", "--device", "cpu"])
    assert f"speculative ({NAME})" in capsys.readouterr().out
    main(["bench", "--prompt", "def f(x):", "--max-new-tokens", "4", "--repeats", "1", "--device", "cpu",
          "--methods", f"{bench.TARGET_ONLY},{ROW}"])
    table = capsys.readouterr().out
    assert f"\n{NAME} " in table and "\ntarget-only " in table


def test_the_toy_methods_section_of_the_model_card(toy, tmp_path, capsys):
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / toy.card.marker).write_text("{}")  # its weights are there
    out = tmp_path / "MODEL_CARD.md"
    out.write_text("# A card\n\n## Another section\n\nkept\n")
    main(["card", "--pair-dir", str(tmp_path), "--only", FOLDER, "--num-prompts", "2", "--max-new-tokens", "8",
          "--out", str(out)])
    card = out.read_text()
    assert "## Another section\n\nkept" in card and f"{HEADING}\n\n{NAME} drafts the last token 2 x 8." in card


def test_a_method_with_weights_gets_its_flag(monkeypatch, tmp_path, capsys):
    """Its weights option and flag in the entry (Method.weights, weights_flag) are all it takes: generate and
    bench offer --repeat-table, and generate hands the directory to its load function."""
    loaded = []
    entry = replace(ENTRY, weights="table", weights_flag="repeat-table", weights_help="repeat-last table",
                    load=lambda target, **options: loaded.append(options) or RepeatLast(**options))
    monkeypatch.setitem(REGISTRY, NAME, entry)
    for command in ("generate", "bench"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--repeat-table REPEAT_TABLE" in capsys.readouterr().out
    main(["generate", "def f(x):", "--method", NAME, "--repeat-table", str(tmp_path), "--max-new-tokens", "4",
          "--device", "cpu"])
    assert loaded == [{"table": str(tmp_path)}] and f"speculative ({NAME})" in capsys.readouterr().out
    monkeypatch.undo()
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "--repeat-table" not in capsys.readouterr().out  # gone with its entry


def test_a_method_with_a_setting_of_its_own_declares_generates_flag(monkeypatch, capsys):
    """A flag in the entry (Method.flags, read by flag_options) is all a setting takes: generate offers it,
    hands it to the load function, and refuses it with a method that does not read it."""
    loaded = []
    entry = replace(ENTRY, flags=(Flag("--repeat-times", dict(type=int, default=2, help="how often")),),
                    flag_options=lambda args: dict(times=args.repeat_times),
                    load=lambda target, **options: loaded.append(options) or RepeatLast(**options))
    monkeypatch.setitem(REGISTRY, NAME, entry)
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "--repeat-times REPEAT_TIMES" in capsys.readouterr().out
    main(["generate", "def f(x):", "--method", NAME, "--repeat-times", "5", "--max-new-tokens", "4", "--device", "cpu"])
    assert loaded == [{"times": 5}]
    with pytest.raises(SystemExit, match=f"--repeat-times is a setting of --method {NAME}: use it with that method, "
                                         "not draft_model"):
        main(["generate", "def f(x):", "--method", "draft_model", "--repeat-times", "5", "--device", "cpu"])


def test_a_method_with_a_sweep_of_its_own_gets_a_bench_row_per_value(monkeypatch, pair, prompt, tmp_path, capsys):
    """A sweep declared beside the method (Sweep) and named by its row (BenchRow.sweep) is all a swept setting
    takes: the plan makes a row per value (the default's one value: the row as registered), run_bench takes it
    by name, bench offers its flag and records its values, and a label of one value points at the flag."""
    loaded = []
    sweep = Sweep("repeat_times", Flag("--repeat-times", dict(type=int, nargs="+", metavar="N", help="how often")),
                  lambda values: named(values, lambda n: f"x{n}", lambda n, text: Setting(text, dict(times=n))),
                  default=(2,))
    entry = replace(ENTRY, rows=(BenchRow(sweep=sweep),),
                    load=lambda target, **options: loaded.append(options) or RepeatLast(**options))
    monkeypatch.setitem(REGISTRY, NAME, entry)
    rows = bench.plan((ROW,), bench.Settings.of(k=3, repeat_times=[1, 3]))
    assert [(r.label, dict(r.load)) for r in rows] == [(f"{ROW} x1", {"times": 1}), (f"{ROW} x3", {"times": 3})]
    assert [(r.label, dict(r.load)) for r in bench.plan((ROW,))] == [(ROW, {"times": 2})]
    timed = bench.run_bench(*pair, [prompt], k=3, max_new_tokens=6, methods=(bench.TARGET_ONLY, ROW), warmup=False,
                            repeat_times=[1, 3])
    assert [r.method for r in timed] == [bench.TARGET_ONLY, f"{ROW} x1", f"{ROW} x3"]
    assert all(r.matches_target_only for r in timed[1:]) and {"times": 3} in loaded
    with pytest.raises(ValueError, match=f"ask for '{ROW}' and set the row with --repeat-times N"):
        bench.plan((f"{ROW} x5",))
    with pytest.raises(ValueError, match="no bench sweep is named \\['repeat_count'\\]"):
        bench.Settings.of(repeat_count=[1])
    record = tmp_path / "bench.json"
    main(["bench", "--prompt", "def f(x):", "--max-new-tokens", "4", "--repeats", "1", "--device", "cpu",
          "--methods", f"{bench.TARGET_ONLY},{ROW}", "--repeat-times", "1", "3", "--json", str(record)])
    assert f"\n{NAME} x3 " in capsys.readouterr().out
    written = json.loads(record.read_text())
    assert written["repeat_times"] == [1, 3] and written["lookahead"] == [[4, 4, 4]]  # every sweep's values
    monkeypatch.undo()
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "--repeat-times" not in capsys.readouterr().out  # gone with its entry
