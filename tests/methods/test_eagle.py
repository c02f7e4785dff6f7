"""EAGLE-1 (speclab.methods.eagle): the head, the drafter's feature bookkeeping, exactness, losslessness, and
heads refused for the wrong target."""
import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import tests.test_lossless as lossless
from speclab import SamplingParams, generate, speculative_generate, trees
from speclab.methods.eagle import TREE_SETTINGS, EagleDrafter, EagleHead
from speclab.measure.acceptance import chi_square_pvalue
from speclab.measure.lossless import replayed_passes
from speclab.train.data import target_features
from speclab.train.eagle import eagle_loss
from tests.conftest import tiny_model

PROMPT = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9])


def random_head(target, seed=0, scale=0.5):
    torch.manual_seed(seed)
    head = EagleHead.for_target(target)
    torch.nn.init.normal_(head.fc.weight, 0, scale / head.fc.weight.shape[1] ** 0.5)
    return head.eval()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_greedy_eagle_equals_target_only(arch, tree):
    target = tiny_model(arch, layers=2, seed=0)
    reference = generate(target, PROMPT, max_new_tokens=30).tokens.tolist()
    drafter = EagleDrafter(random_head(target), target, tree=tree, top_k=3, depth=4, total_tokens=10)
    for k in (1, 3, 5):
        assert speculative_generate(target, drafter, PROMPT, k=k, max_new_tokens=30).tokens.tolist() == reference
    one = torch.tensor([7])  # a one-token prompt: no feature before the first round
    assert speculative_generate(target, drafter, one, k=3, max_new_tokens=8).tokens.tolist() == \
        generate(target, one, max_new_tokens=8).tokens.tolist()


def test_without_k_eagle2_drafts_its_own_depth_and_other_drafters_ask_for_k():
    """speculative_generate(k=None) grows EAGLE-2's tree to its own depth (a k of 4 would cut an
    8-deep tree); a chain and a draft model have no depth of their own, and the error says to pass k."""
    target = tiny_model("llama", layers=2, seed=0)
    reference = generate(target, PROMPT, max_new_tokens=30).tokens.tolist()
    drafter = EagleDrafter(random_head(target), target, top_k=1, depth=8, total_tokens=8)
    own = speculative_generate(target, drafter, PROMPT, max_new_tokens=30)
    assert own.tokens.tolist() == reference and own.stats.k == 8 == drafter.own_depth
    assert speculative_generate(target, drafter, PROMPT, k=4, max_new_tokens=30).stats.k == 4
    for other in (EagleDrafter(random_head(target), target, tree="chain"), tiny_model("llama", layers=1, seed=1)):
        with pytest.raises(ValueError, match="pass k"):
            speculative_generate(target, other, PROMPT, max_new_tokens=4)


def test_the_drafter_pairs_features_and_tokens_as_training_does():
    """The first draft of a round is the head's prediction from the last (feature, token) pair, exactly
    what eagle_loss trains at that position: features and tokens are not off by one."""
    target = tiny_model("llama", layers=2, seed=0)
    head = random_head(target)
    h = target_features(target, PROMPT.view(1, -1), torch.device("cpu")).float()
    with torch.no_grad():
        embeds = target.get_input_embeddings()(PROMPT[1:]).float()
        predicted = head(embeds, h[0, :-1])
    drafter = EagleDrafter(head, target, tree="chain")
    drafter.start(PROMPT)
    drafter.take_features(h[0, :-1])  # what the prefill hands over: features of all but the pending token
    draft = drafter.propose(PROMPT, 1, SamplingParams(0.0))
    assert draft.tokens.tolist() == [int(target.get_output_embeddings()(predicted[-1]).argmax())]


def test_the_dynamic_tree_is_what_the_head_predicts_along_each_path():
    """EAGLE-2's level-by-level tree pass in the head's cache (tree mask, positions by depth) gives each
    node the feature the head computes when it drafts that path as a chain: every node's children are
    among the top_k tokens of that feature. The tree is ancestor-closed, at most total_tokens nodes, and
    scores fall along every path."""
    target = tiny_model("llama", layers=2, seed=0)
    head = random_head(target, scale=2.0)
    h = target_features(target, PROMPT.view(1, -1), torch.device("cpu")).float()
    drafter = EagleDrafter(head, target, tree="dynamic", top_k=3, depth=4, total_tokens=12)
    drafter.start(PROMPT)
    drafter.take_features(h[0, :-1])
    draft = drafter.propose(PROMPT, 4, SamplingParams(0.0))
    assert len(draft) == 12 and max(trees.depths(draft.parents)) <= 4
    lm_head, embed = target.get_output_embeddings(), target.get_input_embeddings()
    with torch.no_grad():
        for node in range(-1, len(draft)):
            children = [i for i, p in enumerate(draft.parents) if p == node]
            if not children:
                continue
            path = trees.path_to(draft.parents, node)
            cache = head.new_cache()
            feature = head(embed(PROMPT[1:]), h[0, :-1], cache)[-1]
            for n in path:
                feature = head(embed(draft.tokens[n].view(1)), feature.view(1, -1), cache)[-1]
            allowed = set(lm_head(feature).topk(3).indices.tolist())
            assert {int(draft.tokens[c]) for c in children} <= allowed, (node, path)


@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=1.0, top_p=0.8)],
                         ids=["temperature 1", "top-p 0.8"])
def test_sampled_eagle2_trees_follow_the_target(settings):
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    drafter = EagleDrafter(random_head(target, scale=2.0), target, tree="dynamic", top_k=2, depth=2, total_tokens=5)
    counts, accepted = sampled_joint(target, drafter, settings)
    assert accepted > 100
    assert chi_square_pvalue(counts, lossless.exact_joint(target, settings)) > 1e-3


def test_bad_eagle2_settings_are_refused():
    target = tiny_model("llama", layers=2, seed=0)
    head = EagleHead.for_target(target)
    for options, message in [(dict(tree="wide"), "tree must be"), (dict(top_k=0), "top_k"), (dict(depth=0), "depth"),
                             (dict(total_tokens=0), "total_tokens"), (dict(min_confidence=0), "strictly between"),
                             (dict(min_confidence=1.0), "strictly between"), (dict(min_confidence=True), "between"),
                             (dict(min_confidence="0.1"), "between"),
                             (dict(tree="chain", min_confidence=0.1), "confidence_threshold")]:
        with pytest.raises(ValueError, match=message):
            EagleDrafter(head, target, **options)


def expansion(drafter, head_input):
    """Propose once from a fresh state; the whole expansion (every node scored) and its levels."""
    h, target = head_input
    drafter.start(PROMPT)
    drafter.take_features(h[0, :-1])
    drafter.propose(PROMPT, drafter.depth, SamplingParams(0.0))
    grown = drafter.last_expansion
    return grown, trees.depths(grown["parents"])


def test_the_tree_stops_growing_after_the_first_level_below_min_confidence():
    """With min_confidence the tree is the unstopped tree cut after the first level whose most probable
    node (its probability given its parent) is below the threshold, and no earlier."""
    target = tiny_model("llama", layers=2, seed=10, init=0.2)  # a head whose levels differ in confidence
    head = random_head(target, scale=2.0)
    head_input = (target_features(target, PROMPT.view(1, -1), torch.device("cpu")).float(), target)
    settings = dict(tree="dynamic", top_k=2, depth=5, total_tokens=10)
    full, levels = expansion(EagleDrafter(head, target, **settings), head_input)
    assert max(levels) == 5
    parent_score = [full["scores"][p] if p >= 0 else 0.0 for p in full["parents"]]
    best = [max(s - ps for s, ps, lv in zip(full["scores"], parent_score, levels) if lv == level)
            for level in range(1, 6)]  # each level's most probable node, given its parent (log)
    # thresholds just above each node's probability given its parent, so that each level's best
    # node, and any other, sits on either side of one
    checked = set()
    given_parent = [s - ps for s, ps in zip(full["scores"], parent_score)]
    for threshold in sorted({min(0.999, float(np.exp(c)) * 1.001) for c in given_parent}):
        stop = next((level for level, b in enumerate(best, 1) if b < np.log(threshold)), 5)
        grown, cut_levels = expansion(EagleDrafter(head, target, **settings, min_confidence=threshold), head_input)
        assert max(cut_levels) == stop, (threshold, best)
        n = sum(level <= stop for level in levels)  # nodes are recorded level by level
        assert grown["tokens"] == full["tokens"][:n] and grown["parents"] == full["parents"][:n]
        checked.add(stop)
    assert len(checked) >= 2  # the random head's levels differ enough to stop in more than one place


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_eagle2_with_a_stop_equals_target_only(arch):
    target = tiny_model(arch, layers=2, seed=10, init=0.2)
    reference = generate(target, PROMPT, max_new_tokens=30).tokens.tolist()
    drafted = []
    for threshold in (None, 0.3, 0.6):
        drafter = EagleDrafter(random_head(target, scale=2.0), target, top_k=2, depth=6, total_tokens=8,
                               min_confidence=threshold)
        result = speculative_generate(target, drafter, PROMPT, k=6, max_new_tokens=30)
        assert result.tokens.tolist() == reference
        drafted.append(drafter.forward_calls / result.stats.rounds)
    assert drafted[0] > drafted[1] > drafted[2]  # the stop cuts head passes: it did stop


def stopped_tree_joint(target) -> tuple[np.ndarray, int, list[bool]]:
    """Samples of the first two tokens at temperature 1 from EAGLE-2 trees with a stop (four tokens are
    generated so that rounds may grow up to three levels), the drafts accepted in first rounds, and
    every stop decision taken."""
    drafter = EagleDrafter(random_head(target, scale=2.0), target, tree="dynamic", top_k=2, depth=3, total_tokens=5,
                           min_confidence=0.7)  # this random head is sure of about 9 levels in 10
    decisions = []
    unsure = drafter._unsure
    drafter._unsure = lambda *args: decisions.append(unsure(*args)) or decisions[-1]
    counts, accepted = np.zeros((lossless.VOCAB, lossless.VOCAB)), 0
    with replayed_passes():  # the target's passes computed once per history: the same samples, for less
        for seed in range(1000):  # enough: the broken rule below scores p ~ 1e-43 on these samples
            result = speculative_generate(target, drafter, lossless.PROMPT, k=3, max_new_tokens=4, seed=seed,
                                          temperature=1.0)
            t1, t2 = result.tokens.tolist()[:2]
            counts[t1, t2] += 1
            accepted += result.trace[0].accepted
    return counts, accepted, decisions


def test_sampled_eagle2_trees_with_a_stop_follow_the_target():
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    counts, accepted, decisions = stopped_tree_joint(target)
    assert accepted > 100
    assert sum(decisions) > 100 and len(decisions) - sum(decisions) > 100  # stopped, and grown on
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) > 1e-3


def test_the_check_catches_a_broken_rule_on_stopped_trees(monkeypatch):
    """The same test fails when the rule samples p instead of the residual after a rejection."""
    import speclab.verification as verification
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    counts, _, _ = stopped_tree_joint(target)
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) < 1e-3


def one_child_joint(target, settings, min_confidence=None) -> tuple[np.ndarray, int]:
    """Samples of the first two tokens from EAGLE-2 trees with one child per node (chains up to three
    deep: four tokens are generated), whose tokens are drawn from the head's served distribution, and
    the drafts accepted in first rounds."""
    drafter = EagleDrafter(random_head(target, scale=2.0), target, tree="dynamic", top_k=1, depth=3, total_tokens=3,
                           min_confidence=min_confidence)
    counts, accepted = np.zeros((lossless.VOCAB, lossless.VOCAB)), 0
    with replayed_passes():
        for seed in range(1000):
            result = speculative_generate(target, drafter, lossless.PROMPT, k=3, max_new_tokens=4, seed=seed,
                                          **settings)
            t1, t2 = result.tokens.tolist()[:2]
            counts[t1, t2] += 1
            accepted += result.trace[0].accepted
    return counts, accepted


def test_one_child_trees_draw_their_tokens_when_sampling():
    """With top_k 1 a sampled round drafts a chain of tokens drawn from the head's served distribution
    (reported with it); a greedy round keeps the head's top token as a point mass, EAGLE-2's way."""
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    prompt = lossless.PROMPT
    h = target_features(target, prompt.view(1, -1), torch.device("cpu")).float()
    drafter = EagleDrafter(random_head(target, scale=2.0), target, tree="dynamic", top_k=1, depth=4, total_tokens=4)
    drafts = {}
    for temperature in (0.0, 1.0):
        drafter.start(prompt)
        drafter.take_features(h[0, :-1])
        drafts[temperature] = drafter.propose(prompt, 4, SamplingParams(temperature, top_p=0.9 if temperature else None),
                                              torch.Generator().manual_seed(0))
    assert drafts[0.0].probs is None and len(drafts[0.0]) == 4
    sampled = drafts[1.0]
    assert sampled.is_chain and sampled.probs is not None and sampled.probs.shape == (4, lossless.VOCAB)
    assert torch.allclose(sampled.probs.sum(-1), torch.ones(4))
    assert all(sampled.probs[i, t] > 0 for i, t in enumerate(sampled.tokens.tolist()))  # drawn from them


@pytest.mark.parametrize("settings, stop", [(dict(temperature=1.0), None), (dict(temperature=1.0, top_p=0.8), 0.5)],
                         ids=["temperature 1", "top-p 0.8, with a stop"])
def test_sampled_one_child_trees_follow_the_target(settings, stop):
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    counts, accepted = one_child_joint(target, settings, stop)
    assert accepted > 100
    assert chi_square_pvalue(counts, lossless.exact_joint(target, settings)) > 1e-3


def test_the_check_catches_a_broken_rule_on_one_child_trees(monkeypatch):
    """The same test fails when the rule samples p instead of the residual after a rejection."""
    import speclab.verification as verification
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    counts, _ = one_child_joint(target, dict(temperature=1.0))
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) < 1e-3


def test_a_short_training_lowers_both_losses():
    target = tiny_model("llama", layers=2, seed=0)
    for p in target.parameters():
        p.requires_grad_(False)
    rows = torch.randint(0, 96, (8, 24), generator=torch.Generator().manual_seed(0))
    h = target_features(target, rows, torch.device("cpu")).float()
    head = EagleHead.for_target(target)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss, feature_loss, ce = eagle_loss(head, target.get_input_embeddings(), target.get_output_embeddings(),
                                            rows, h, noise=0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append((feature_loss, ce))
    assert losses[-1][0] < 0.5 * losses[0][0] and losses[-1][1] < losses[0][1]


def sampled_joint(target, drafter, settings) -> tuple[np.ndarray, int]:
    counts, accepted = np.zeros((lossless.VOCAB, lossless.VOCAB)), 0
    with replayed_passes():
        for seed in range(1000):  # the rule without the residual: chi-square ~210 on 50 degrees of freedom here
            result = speculative_generate(target, drafter, lossless.PROMPT, k=2, max_new_tokens=2, seed=seed,
                                          **settings)
            t1, t2 = result.tokens.tolist()
            counts[t1, t2] += 1
            accepted += result.stats.accepted
    return counts, accepted


@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=1.0, top_p=0.8)],
                         ids=["temperature 1", "top-p 0.8"])
def test_sampled_eagle_chains_follow_the_target(settings):
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    drafter = EagleDrafter(random_head(target, scale=2.0), target, tree="chain")
    counts, accepted = sampled_joint(target, drafter, settings)
    assert accepted > 100
    assert chi_square_pvalue(counts, lossless.exact_joint(target, settings)) > 1e-3


def test_the_check_catches_a_rule_without_residual(monkeypatch):
    """A deliberately broken rule (after a rejection, sample p instead of the residual) fails the same
    test with the same head. (Dropping q instead would not: the point-mass rule is lossless for any
    proposed token, however it was chosen.)"""
    import speclab.verification as verification
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    drafter = EagleDrafter(random_head(target, scale=2.0), target, tree="chain")
    counts, _ = sampled_joint(target, drafter, dict(temperature=1.0))
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) < 1e-3


def test_a_head_for_another_target_is_refused_with_what_to_do(tmp_path):
    target = tiny_model("llama", layers=2, seed=0)
    head = EagleHead.for_target(target)
    head.save(tmp_path / "eagle")
    loaded = EagleHead.load(tmp_path / "eagle")
    EagleDrafter(loaded, target)  # fits its own target
    for other, what in [(tiny_model("llama", layers=3, seed=0), "layers"),
                        (tiny_model("llama", layers=2, vocab=64, seed=0), "vocab"),
                        (tiny_model("qwen2", layers=2, seed=0), "model_type"),
                        (tiny_model("llama", layers=2, seed=5), "checksums")]:
        with pytest.raises(ValueError, match=what) as error:
            EagleDrafter(loaded, other)
        assert "train eagle" in str(error.value)


def test_a_loaded_head_drafts_in_a_drafts_precision_and_stays_exact(tmp_path):
    """On a CPU load_drafter's head drafts in float16 as a draft model does (devices.draft_dtype); a
    loaded head stays in float32, the precision heads train in; greedy output is the target's either
    way, the prompt's catch-up (many rows) included."""
    from speclab import load_drafter
    target = tiny_model("llama", layers=2, seed=0)
    EagleHead.for_target(target).save(tmp_path / "eagle")
    half, full = load_drafter("eagle", target, head=tmp_path / "eagle").head, EagleHead.load(tmp_path / "eagle")
    assert half.dtype == torch.float16 and full.dtype == torch.float32
    prompt = torch.arange(1, 40) % target.config.vocab_size  # past devices.CPU_FLOAT32_ROWS
    reference = generate(target, prompt, max_new_tokens=12).tokens.tolist()
    for head in (half, full):
        drafter = EagleDrafter(head, target, tree="chain")
        assert speculative_generate(target, drafter, prompt, k=3, max_new_tokens=12).tokens.tolist() == reference


def test_a_target_whose_layers_cannot_be_mirrored_is_refused():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=96))
    with pytest.raises(TypeError, match="Llama-family"):
        EagleHead.for_target(gpt2)


def test_load_drafter_builds_eagle_from_a_head_directory(tmp_path):
    from speclab import load_drafter
    target = tiny_model("llama", layers=2, seed=0)
    EagleHead.for_target(target).save(tmp_path / "eagle")
    drafter = load_drafter("eagle", target, head=tmp_path / "eagle")
    assert isinstance(drafter, EagleDrafter)
    with pytest.raises(FileNotFoundError, match="train eagle"):
        load_drafter("eagle", target, head=tmp_path / "nothing")


def test_train_eagle_micro_shares_features_resumes_installs_and_drafts(tmp_path):
    import json

    import speclab
    from speclab.devices import cpu_name
    from speclab.cli.train import main as train_main
    from speclab.train import install
    pair = tmp_path / "pair"
    train_main(["pair", "--out", str(pair), "--preset", "micro", "--device", "cpu", "--no-plain-draft"])
    out = tmp_path / "heads"
    train_main(["medusa", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "2"])
    features = (out / "features.pt").stat().st_mtime
    train_main(["eagle", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "3"])
    train_main(["eagle", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "5"])
    assert (out / "features.pt").stat().st_mtime == features  # Medusa's cached features, reused
    record = json.loads((out / "eagle" / "record.json").read_text())
    assert [e["step"] for e in record["log"]["evals"]] == [0, 3, 5]  # resumed, not restarted
    assert len(record["log"]["train"]) == 5
    # EAGLE-2's settings chosen by timing, on held-out prompts that speclab bench does not time
    tree = json.loads((out / "eagle" / "tree.json").read_text())
    assert tree["prompts"] == "held-out code prompts 5-5"
    assert tree["hardware"].startswith(cpu_name())  # timings name their CPU
    assert len(tree["table"]) == len(speclab.train.tuning.EAGLE_TREE_CANDIDATES)
    assert tuple(tree[name] for name in TREE_SETTINGS) in speclab.train.tuning.EAGLE_TREE_CANDIDATES
    # and, timed at temperature 1, the settings of sampled rounds
    assert tree["temperature"] == 0 and tree["sampled"]["temperature"] == 1
    assert len(tree["sampled"]["table"]) == len(speclab.train.tuning.EAGLE_SAMPLED_CANDIDATES)
    assert tuple(tree["sampled"][name] for name in TREE_SETTINGS) in speclab.train.tuning.EAGLE_SAMPLED_CANDIDATES
    # more of the target's continuations: the shared features are rebuilt for them, not reused...
    train_main(["eagle3", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "2",
                "--generated", "6"])
    micro = speclab.train.eagle.EAGLE_PRESETS["micro"]
    rows = json.loads((out / "eagle3" / "record.json").read_text())["training_rows"]
    assert rows == micro.corpus_rows + 6 != record["training_rows"] == micro.corpus_rows + micro.generated
    generated = torch.load(out / "generated.pt")
    assert len(generated) == 6 and len({tuple(r.tolist()) for r in generated}) == 6  # continued, not repeated
    # ...and a checkpoint trained on the other rows is not resumed on these
    with pytest.raises(ValueError, match="pass the same --generated"):
        train_main(["eagle", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "6",
                    "--generated", "6"])
    installed = install(out, "eagle", tmp_path / "package")
    target, _, tok, _ = speclab.load_pair(str(pair / "target"), draft=pair / "draft", device="cpu")
    drafter = speclab.load_drafter("eagle", target, head=installed)
    ids = tok("def f(x):\n", return_tensors="pt").input_ids[0]
    assert speclab.speculative_generate(target, drafter, ids, k=3, max_new_tokens=8).tokens.tolist() == \
        speclab.generate(target, ids, max_new_tokens=8).tokens.tolist()


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
@pytest.mark.parametrize("tree", ["dynamic", "chain"])
def test_the_shipped_heads_decode_the_bundled_target_exactly(method, tree):
    import speclab
    from speclab.corpus import heldout_prompts
    target, _, tok, _ = speclab.load_pair(device="cpu")
    drafter = speclab.load_drafter(method, target, tree=tree)
    prompt = tok(heldout_prompts("code", 1)[0], return_tensors="pt").input_ids[0]
    result = speculative_generate(target, drafter, prompt, k=6, max_new_tokens=48)
    assert result.tokens.tolist() == generate(target, prompt, max_new_tokens=48).tokens.tolist()
    assert result.stats.mean_tokens_per_round > 2.0  # a trained head; an untrained one gives about 1.0


# ---------------------------------------------------------------- EAGLE-2's tree as plain functions
def test_expand_level_scores_children_by_their_paths_and_sorts_them():
    from speclab.methods.eagle import expand_level
    log_probs = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]]))
    children = expand_level([-1.0, -0.5], log_probs, top_k=2)
    assert [(i, token) for _, i, token in children] == [(1, 1), (0, 0), (1, 2), (0, 1)]
    assert children[0][0] == pytest.approx(-0.5 + np.log(0.6))
    with pytest.raises(ValueError, match="frontier"):
        expand_level([0.0], log_probs, top_k=2)


def test_rerank_keeps_an_ancestor_closed_tree_in_node_order():
    from speclab.methods.eagle import expand_level, rerank
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        scores, parents, frontier = [], [], [-1]
        for _ in range(4):  # grow a tree as EAGLE-2 does, from random distributions
            children = expand_level([scores[n] if n >= 0 else 0.0 for n in frontier],
                                    torch.log_softmax(torch.randn(len(frontier), 9, generator=g) * 2, -1), 3)
            new = []
            for score, i, _ in children:
                scores.append(score)
                parents.append(frontier[i])
                new.append(len(scores) - 1)
            frontier = new[:3]
        budget = 1 + trial % 12
        keep, kept_parents = rerank(scores, parents, budget)
        assert len(keep) == budget and keep == sorted(keep)
        assert all(p < i for i, p in enumerate(kept_parents))  # parents kept, and before their children
        assert [keep[p] if p >= 0 else -1 for p in kept_parents] == [parents[n] for n in keep]
        best = sorted(scores, reverse=True)[:budget]
        assert sorted((scores[n] for n in keep), reverse=True) == best


# ---------------------------------------------------------------- EAGLE-3
def random_head3(target, seed=0, scale=0.5):
    torch.manual_seed(seed)
    head = EagleHead.for_target(target, version=3)
    attn = head.midlayer.self_attn
    for layer in (head.fc, attn.q_proj, attn.k_proj, attn.v_proj):
        torch.nn.init.normal_(layer.weight, 0, scale / layer.weight.shape[1] ** 0.5)
    return head.eval()


def test_eagle3_reads_a_low_a_middle_and_a_high_layer():
    from speclab.methods.eagle import eagle3_layers
    assert eagle3_layers(24) == (2, 12, 21)  # the bundled target's
    assert eagle3_layers(32) == (2, 16, 29)
    assert eagle3_layers(2) == (2, 1, 1)      # shallow test models stay within their layers
    target = tiny_model("llama", layers=4, seed=0)
    head = EagleHead.for_target(target, version=3)
    assert head.feature_layers == (2, 2, 1) and head.fc.in_features == 3 * target.config.hidden_size


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_greedy_eagle3_equals_target_only(arch, tree):
    target = tiny_model(arch, layers=4, seed=0)
    reference = generate(target, PROMPT, max_new_tokens=30).tokens.tolist()
    drafter = EagleDrafter(random_head3(target), target, tree=tree, top_k=3, depth=4, total_tokens=10)
    assert drafter.feature_layers == drafter.head.feature_layers != (-1,)
    for k in (1, 3, 5):
        assert speculative_generate(target, drafter, PROMPT, k=k, max_new_tokens=30).tokens.tolist() == reference


def test_the_training_time_test_unrolls_exactly_what_the_drafter_computes():
    """unroll's step j at anchor t (the training-time test, EAGLE-3's loss and the accuracy by draft
    position) is the output the head computes when it drafts j steps on its own outputs after true
    pair t, with its cache, fed the same tokens: the mask and positions of the unrolled pass are right."""
    from speclab.train.eagle import unroll
    target = tiny_model("llama", layers=4, seed=0)
    head = random_head3(target, seed=1)
    embed = target.get_input_embeddings()
    layered = target_features(target, PROMPT.view(1, -1), torch.device("cpu"), layers=head.feature_layers).float()
    steps = 3
    with torch.no_grad():
        unrolled = unroll(head, embed, PROMPT.view(1, -1), head.fuse(layered[:, :-1]), steps)
        for t in range(len(PROMPT) - steps):
            cache = head.new_cache()
            h = head(embed(PROMPT[1:t + 2]), head.fuse(layered[0, :t + 1]), cache)[-1]
            for j in range(steps):
                if j:
                    h = head(embed(PROMPT[t + 1 + j:t + 2 + j]), h.view(1, -1), cache)[-1]
                assert torch.allclose(h, unrolled[j][0, t], atol=2e-4), (t, j)


def test_unroll_mask_sees_the_true_prefix_and_its_own_chain():
    from speclab.train.eagle import unroll_mask
    visible = unroll_mask(3, 2, torch.float32)[0, 0] == 0
    assert visible.tolist() == [[1, 0, 0, 1, 0, 0, 1, 0, 0],
                                [1, 1, 0, 0, 1, 0, 0, 1, 0],
                                [1, 1, 1, 0, 0, 1, 0, 0, 1]]


def test_a_short_eagle3_training_lowers_every_step_loss():
    from speclab.train.eagle import eagle3_loss, unrolled_accuracy
    target = tiny_model("llama", layers=4, seed=0)
    for p in target.parameters():
        p.requires_grad_(False)
    rows = torch.randint(0, 96, (8, 24), generator=torch.Generator().manual_seed(0))
    final = target_features(target, rows, torch.device("cpu")).float()
    head = EagleHead.for_target(target, version=3)
    layered = target_features(target, rows, torch.device("cpu"), layers=head.feature_layers).float()
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    history = []
    for _ in range(30):
        loss, per_step = eagle3_loss(head, embed, lm_head, rows, layered, final, steps=3)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(per_step)
    assert len(history[0]) == 3 and all(last < first for first, last in zip(history[0], history[-1]))
    accuracy = unrolled_accuracy(head, embed, lm_head, rows, layered, final, steps=4)
    assert len(accuracy) == 4 and all(0 <= a <= 1 for a in accuracy)
    everywhere = torch.ones(rows.shape, dtype=torch.bool)
    assert unrolled_accuracy(head, embed, lm_head, rows, layered, final, 4, everywhere) == accuracy
    one = torch.zeros(rows.shape, dtype=torch.bool)
    one[0, 5] = True  # one drafted token at each step: right or wrong
    assert all(a in (0.0, 1.0) for a in unrolled_accuracy(head, embed, lm_head, rows, layered, final, 4, one))


def test_eagle3_loss_with_answers_learns_only_where_the_target_answers():
    from speclab.train.eagle import eagle3_loss
    target = tiny_model("llama", layers=4, seed=0)
    rows = torch.randint(0, 96, (4, 16), generator=torch.Generator().manual_seed(1))
    final = target_features(target, rows, torch.device("cpu")).float()
    head = EagleHead.for_target(target, version=3)
    layered = target_features(target, rows, torch.device("cpu"), layers=head.feature_layers).float()
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    answers = torch.zeros(rows.shape, dtype=torch.bool)
    answers[:, 8:] = True
    with torch.no_grad():
        loss, _ = eagle3_loss(head, embed, lm_head, rows, layered, final, 3, answers=answers)
        moved = final.clone()
        moved[:, :8] += torch.randn(moved[:, :8].shape)  # the teacher changes only where the target does not answer
        assert torch.allclose(eagle3_loss(head, embed, lm_head, rows, layered, moved, 3, answers=answers)[0], loss)
        assert not torch.allclose(eagle3_loss(head, embed, lm_head, rows, layered, moved, 3)[0],
                                  eagle3_loss(head, embed, lm_head, rows, layered, final, 3)[0])
        everywhere = torch.ones(rows.shape, dtype=torch.bool)
        assert torch.allclose(eagle3_loss(head, embed, lm_head, rows, layered, final, 3, answers=everywhere)[0],
                              eagle3_loss(head, embed, lm_head, rows, layered, final, 3)[0])


@pytest.mark.parametrize("settings", [dict(temperature=1.0), dict(temperature=1.0, top_p=0.8),
                                      dict(temperature=0.8, top_k=3)],
                         ids=["temperature 1", "top-p 0.8", "top-k 3"])
def test_sampled_eagle3_trees_follow_the_target(settings):
    target = tiny_model("llama", layers=3, vocab=lossless.VOCAB, seed=10, init=0.2)
    drafter = EagleDrafter(random_head3(target, scale=2.0), target, tree="dynamic", top_k=2, depth=2,
                           total_tokens=5)
    counts, accepted = sampled_joint(target, drafter, settings)
    assert accepted > 100
    assert chi_square_pvalue(counts, lossless.exact_joint(target, settings)) > 1e-3


def test_eagle3_heads_are_refused_for_other_targets_and_as_eagle1(tmp_path):
    from speclab import load_drafter
    target = tiny_model("llama", layers=4, seed=0)
    EagleHead.for_target(target, version=3).save(tmp_path / "eagle3")
    EagleHead.for_target(target).save(tmp_path / "eagle1")
    assert load_drafter("eagle3", target, head=tmp_path / "eagle3").name == "eagle3 tree"
    with pytest.raises(ValueError, match="EAGLE-3 head, not an EAGLE-1") as error:
        load_drafter("eagle", target, head=tmp_path / "eagle3")
    assert "load_drafter('eagle3'" in str(error.value)
    with pytest.raises(ValueError, match="EAGLE-1 head, not an EAGLE-3"):
        load_drafter("eagle3", target, head=tmp_path / "eagle1")
    with pytest.raises(ValueError, match="layers") as error:
        load_drafter("eagle3", tiny_model("llama", layers=3, seed=0), head=tmp_path / "eagle3")
    assert "train eagle3" in str(error.value)
    with pytest.raises(ValueError, match="version must be 1 or 3"):
        EagleHead.for_target(target, version=2)


def test_train_eagle3_micro_resumes_installs_and_drafts(tmp_path):
    import json

    import speclab
    from speclab.cli.train import main as train_main
    from speclab.train import install
    pair = tmp_path / "pair"
    train_main(["pair", "--out", str(pair), "--preset", "micro", "--device", "cpu", "--no-plain-draft"])
    out = tmp_path / "heads"
    train_main(["eagle3", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "3"])
    train_main(["eagle3", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "5"])
    record = json.loads((out / "eagle3" / "record.json").read_text())
    assert record["version"] == 3 and [e["step"] for e in record["log"]["evals"]] == [0, 3, 5]
    assert len(record["log"]["evals"][-1]["heldout_top1_by_step"]) == 3  # the micro preset's eval depth
    assert len(record["log"]["train"][-1]) == 1 + 2                      # step, then one loss per unrolled step
    assert json.loads((out / "eagle3" / "tree.json").read_text())["table"]  # EAGLE-2's settings, timed
    installed = install(out, "eagle3", tmp_path / "package")
    target, _, tok, _ = speclab.load_pair(str(pair / "target"), draft=pair / "draft", device="cpu")
    drafter = speclab.load_drafter("eagle3", target, head=installed)
    ids = tok("def f(x):\n", return_tensors="pt").input_ids[0]
    assert speclab.speculative_generate(target, drafter, ids, k=3, max_new_tokens=8).tokens.tolist() == \
        speclab.generate(target, ids, max_new_tokens=8).tokens.tolist()


@pytest.mark.parametrize("inputs", ["feature+token", "feature", "token"])
def test_quick_eagle_trains_each_variant_of_the_ablation(inputs):
    from speclab.train import quick_eagle
    target = tiny_model("llama", layers=2, seed=0)
    rows = torch.randint(0, 96, (8, 24), generator=torch.Generator().manual_seed(0))
    head, losses, accuracy = quick_eagle(target, rows, 12, inputs, heldout=rows[:2], eval_every=6)
    assert len(losses) == 12 and losses[-1][0] < losses[0][0]  # the feature loss falls
    assert [step for step, _ in accuracy] == [0, 6, 12] and all(0 <= a <= 1 for _, a in accuracy)
    with pytest.raises(ValueError, match="inputs must be"):
        quick_eagle(target, rows, 1, "tokens")


def test_the_feature_ablation_hides_the_token_and_the_token_ablation_hides_the_feature():
    """With the token hidden, the head's output cannot depend on which token was sampled; with the
    feature hidden, not on the feature."""
    from speclab.train.eagle import ZeroEmbedding, eagle_predict
    target = tiny_model("llama", layers=2, seed=0)
    head, embed = random_head(target), target.get_input_embeddings()
    tokens = PROMPT.view(1, -1)
    other = tokens.clone()
    other[0, 3] = 50
    h = target_features(target, tokens, torch.device("cpu")).float()
    with torch.no_grad():
        hidden = ZeroEmbedding(embed)
        assert torch.equal(eagle_predict(head, hidden, tokens, h), eagle_predict(head, hidden, other, h))
        assert not torch.equal(eagle_predict(head, embed, tokens, h), eagle_predict(head, embed, other, h))


def test_train_eagle_ablation_writes_its_own_head_and_refuses_install(tmp_path):
    import json

    from speclab.cli.train import main as train_main
    pair = tmp_path / "pair"
    train_main(["pair", "--out", str(pair), "--preset", "micro", "--device", "cpu", "--no-plain-draft"])
    out = tmp_path / "heads"
    train_main(["eagle", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "2",
                "--inputs", "token"])
    record = json.loads((out / "eagle-token" / "record.json").read_text())
    assert record["inputs"] == "token" and len(record["log"]["evals"][-1]["heldout_top1_by_step"]) == 1
    assert not (out / "eagle").exists()
    with pytest.raises(SystemExit, match="measured, not installed"):
        train_main(["eagle", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps",
                    "2", "--inputs", "token", "--install"])


def test_sglang_and_vllm_option_names_are_accepted(tmp_path):
    from speclab import load_drafter
    target = tiny_model("llama", layers=2, seed=0)
    EagleHead.for_target(target).save(tmp_path / "eagle")
    drafter = load_drafter("eagle", target, head=tmp_path / "eagle", speculative_num_steps=5,
                           speculative_eagle_topk=3, speculative_num_draft_tokens=9)
    assert (drafter.depth, drafter.top_k, drafter.total_tokens) == (5, 3, 8)  # SGLang counts the root
    assert load_drafter("eagle", target, head=tmp_path / "eagle", num_speculative_tokens=4).depth == 4
    with pytest.raises(ValueError, match="not both"):
        load_drafter("eagle", target, head=tmp_path / "eagle", depth=3, speculative_num_steps=5)


def test_a_head_directory_can_carry_its_measured_tree_settings(tmp_path):
    import json

    from speclab import load_drafter
    target = tiny_model("llama", layers=2, seed=0)
    EagleHead.for_target(target).save(tmp_path / "eagle")
    (tmp_path / "eagle" / "tree.json").write_text(json.dumps({"top_k": 3, "depth": 4, "total_tokens": 7,
                                                              "min_confidence": 0.2}))
    drafter = load_drafter("eagle", target, head=tmp_path / "eagle")
    assert (drafter.top_k, drafter.depth, drafter.total_tokens, drafter.min_confidence) == (3, 4, 7, 0.2)
    assert load_drafter("eagle", target, head=tmp_path / "eagle", depth=2).depth == 2  # options still win
    assert load_drafter("eagle", target, head=tmp_path / "eagle", min_confidence=None).min_confidence is None
    assert load_drafter("eagle", target, head=tmp_path / "eagle", tree="chain").min_confidence is None  # tree only
    assert drafter.sampled is None  # no sampled entry: sampled rounds use the same settings


def test_sampled_rounds_use_the_settings_timed_for_sampling(tmp_path):
    import json

    from speclab import load_drafter
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    random_head(target, scale=2.0).save(tmp_path / "eagle")
    (tmp_path / "eagle" / "tree.json").write_text(json.dumps(
        {"top_k": 2, "depth": 4, "total_tokens": 7, "min_confidence": None,
         "sampled": {"top_k": 1, "depth": 6, "total_tokens": 6, "min_confidence": None, "table": []}}))
    drafter = load_drafter("eagle", target, head=tmp_path / "eagle")
    assert drafter.sampled == {"top_k": 1, "depth": 6, "total_tokens": 6, "min_confidence": None}
    assert drafter.max_depth == 6
    h = target_features(target, lossless.PROMPT.view(1, -1), torch.device("cpu")).float()
    drafts = {}
    for temperature in (0.0, 1.0):
        drafter.start(lossless.PROMPT)
        drafter.take_features(h[0, :-1])
        drafts[temperature] = drafter.propose(lossless.PROMPT, drafter.max_depth, SamplingParams(temperature),
                                              torch.Generator().manual_seed(0))
    assert len(drafts[0.0]) == 7 and not drafts[0.0].is_chain and drafts[0.0].probs is None  # the greedy tree
    assert len(drafts[1.0]) == 6 and drafts[1.0].is_chain and drafts[1.0].probs is not None  # the sampled one
    # settings passed by the caller apply to every round
    assert load_drafter("eagle", target, head=tmp_path / "eagle", top_k=2).sampled is None
    for bad in ({"top_k": 1, "depth": 6}, {"top_k": 1, "depth": 6, "total_tokens": 6, "width": 2},
                {"top_k": 0, "depth": 6, "total_tokens": 6}):
        with pytest.raises(ValueError, match="sampled=|top_k"):
            EagleDrafter(drafter.head, target, sampled=bad)
    with pytest.raises(ValueError, match="dynamic tree"):
        EagleDrafter(drafter.head, target, tree="chain", sampled={"top_k": 1, "depth": 6, "total_tokens": 6})


@pytest.mark.parametrize("tree", ["dynamic", "chain"])
def test_a_head_that_outputs_nan_is_refused_not_drafted_from(tree):
    target = tiny_model("llama", layers=2, seed=0)
    head = random_head(target)
    with torch.no_grad():
        head.fc.bias.fill_(float("nan"))
    drafter = EagleDrafter(head, target, tree=tree, top_k=2, depth=3, total_tokens=5)
    with pytest.raises(FloatingPointError, match="EAGLE-1 head produced NaN"):
        speculative_generate(target, drafter, PROMPT, k=3, max_new_tokens=8)


# ---------------------------------------------------------------- the reference layouts
def test_the_eagle1_head_follows_the_reference_layout():
    """EAGLE-1 (SafeAILab/EAGLE cnets1.py): fc 2H -> H with a bias, layer 0 without an input norm, the
    target's lm_head read from the layer's output as it is."""
    target = tiny_model("llama", layers=2, seed=0)
    head = EagleHead.for_target(target)
    hidden = target.config.hidden_size
    assert (head.fc.in_features, head.fc.out_features, head.fc.bias is not None) == (2 * hidden, hidden, True)
    assert not any("input_layernorm" in name for name in head.state_dict())
    assert torch.equal(head.layer.mlp.up_proj.weight, target.model.layers[-1].mlp.up_proj.weight)


def test_the_eagle3_head_follows_the_reference_layout():
    """EAGLE-3 (SafeAILab/EAGLE cnets.py; vLLM's LlamaForCausalLMEagle3): the names and shapes a
    serving engine loads, q/k/v reading 2H, an lm_head over the draft vocabulary, d2t and t2d."""
    from speclab.methods.eagle import Eagle3Head
    target = tiny_model("llama", layers=4, seed=0)
    head = Eagle3Head.for_target(target, draft_vocab_size=40)
    hidden, vocab = target.config.hidden_size, target.config.vocab_size
    shapes = {name: tuple(t.shape) for name, t in head.state_dict().items()}
    heads, kv, dim = (target.config.num_attention_heads, target.config.num_key_value_heads,
                      target.config.hidden_size // target.config.num_attention_heads)
    assert shapes == {
        "fc.weight": (hidden, 3 * hidden), "midlayer.self_attn.q_proj.weight": (heads * dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": (kv * dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": (kv * dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": (hidden, heads * dim),
        "midlayer.mlp.gate_proj.weight": (target.config.intermediate_size, hidden),
        "midlayer.mlp.up_proj.weight": (target.config.intermediate_size, hidden),
        "midlayer.mlp.down_proj.weight": (hidden, target.config.intermediate_size),
        "midlayer.input_layernorm.weight": (hidden,), "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.post_attention_layernorm.weight": (hidden,), "norm.weight": (hidden,),
        "lm_head.weight": (40, hidden), "d2t": (40,), "t2d": (vocab,)}


def test_a_draft_vocabulary_keeps_the_most_frequent_tokens_and_maps_them_back():
    from speclab.methods.eagle import draft_vocabulary
    rows = torch.tensor([[5, 5, 5, 9, 9, 2, 7, 7, 7, 7]])
    d2t, t2d = draft_vocabulary(rows, 3, 12)
    ids = torch.arange(3) + d2t
    assert ids.tolist() == [5, 7, 9] and t2d.nonzero().flatten().tolist() == [5, 7, 9]
    with pytest.raises(ValueError, match="draft vocabulary size"):
        draft_vocabulary(rows, 13, 12)


def test_an_eagle3_head_with_a_draft_vocabulary_drafts_only_its_tokens_and_stays_exact(tmp_path):
    """Tokens outside the draft vocabulary get -inf (never drafted); greedy decoding still equals
    target-only and sampling stays lossless, since the target decides; the vocabulary survives a save."""
    from speclab.methods.eagle import Eagle3Head, draft_vocabulary
    target = tiny_model("llama", layers=4, seed=0)
    torch.manual_seed(0)
    rows = torch.randint(0, 60, (4, 32))
    head = Eagle3Head.for_target(target, draft_vocab_size=50)
    head.set_vocabulary(*draft_vocabulary(rows, 50, target.config.vocab_size), target.get_output_embeddings())
    head.save(tmp_path / "eagle3")
    loaded = EagleHead.load(tmp_path / "eagle3")
    assert isinstance(loaded, Eagle3Head) and torch.equal(loaded.d2t, head.d2t) and torch.equal(loaded.t2d, head.t2d)
    logits = loaded.logits(torch.randn(3, target.config.hidden_size), target.get_output_embeddings())
    assert torch.isinf(logits[:, ~loaded.t2d]).all() and torch.isfinite(logits[:, loaded.t2d]).all()
    reference = generate(target, PROMPT, max_new_tokens=20).tokens.tolist()
    for tree in ("chain", "dynamic"):
        drafter = EagleDrafter(loaded, target, tree=tree, top_k=2, depth=3, total_tokens=6)
        assert speculative_generate(target, drafter, PROMPT, k=3, max_new_tokens=20).tokens.tolist() == reference


def test_a_head_in_an_earlier_layout_is_refused_with_what_to_do(tmp_path):
    """A head whose weights do not have the layout's names would load nothing and draft from random
    weights: refused, with the command that retrains it."""
    from safetensors.torch import load_file, save_file
    target = tiny_model("llama", layers=2, seed=0)
    EagleHead.for_target(target).save(tmp_path / "eagle")
    state = load_file(str(tmp_path / "eagle" / "eagle_head.safetensors"))
    state["model.layers.0.input_layernorm.weight"] = torch.ones(target.config.hidden_size, dtype=torch.float16)
    save_file(state, str(tmp_path / "eagle" / "eagle_head.safetensors"))
    with pytest.raises(ValueError, match="another layout.*python -m speclab train eagle"):
        EagleHead.load(tmp_path / "eagle")


def test_eagle3_training_with_a_draft_vocabulary_skips_positions_it_cannot_draft():
    """As in the reference: the teacher restricted to the draft vocabulary, and positions whose target
    token is outside it left out of the loss (draft_space)."""
    from speclab.methods.eagle import Eagle3Head
    from speclab.train.eagle import draft_space
    target = tiny_model("llama", layers=4, seed=0)
    head = Eagle3Head.for_target(target, draft_vocab_size=3)
    d2t, t2d = torch.tensor([1, 1, 1]), torch.zeros(target.config.vocab_size, dtype=torch.bool)
    t2d[[1, 2, 3]] = True
    head.set_vocabulary(d2t, t2d)
    teacher = torch.full((2, target.config.vocab_size), -10.0)
    teacher[0, 2], teacher[1, 50] = 5.0, 5.0  # row 0's target token is drafted (2), row 1's is not (50)
    logits, restricted, kept = draft_space(head, target.get_output_embeddings(), torch.randn(2, 32), teacher)
    assert logits.shape == restricted.shape == (2, 3) and kept.tolist() == [1.0, 0.0]


def test_unrolled_confidence_is_the_heads_top_probability_and_the_targets_verdict():
    """Step 0 from the teacher-forced pass, by hand: the head's top probability, then greedy whether
    it is the target's argmax, sampled the target's probability of it; greedy acceptance at step j
    agrees with unrolled_accuracy."""
    from speclab.train.eagle import unrolled_accuracy, unrolled_confidence
    target = tiny_model("llama", layers=2, seed=0)
    head = random_head(target, seed=3)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    rows = PROMPT.view(1, -1)
    final = target_features(target, rows, torch.device("cpu")).float()
    confidence, greedy = unrolled_confidence(head, embed, lm_head, rows, final, final, 3)
    _, sampled = unrolled_confidence(head, embed, lm_head, rows, final, final, 3, temperature=1.0)
    assert confidence.shape == greedy.shape == sampled.shape == (3, 1, len(PROMPT) - 3)
    with torch.no_grad():
        h = head(embed(rows[:, 1:]), final[:, :-1])
        q = torch.softmax(head.logits(h, lm_head), -1)
        p = torch.softmax(lm_head(final[:, 1:]), -1)
    n = len(PROMPT) - 3
    top = q.argmax(-1)[:, :n]
    torch.testing.assert_close(confidence[0], q.max(-1).values[:, :n])
    assert torch.equal(greedy[0], (p.argmax(-1)[:, :n] == top).float())
    torch.testing.assert_close(sampled[0], p[:, :n].gather(-1, top[..., None])[..., 0])
    accuracy = unrolled_accuracy(head, embed, lm_head, rows, final, final, 3)
    assert [round(float(a.mean()), 4) for a in greedy] == accuracy


def test_the_fastest_tree_setting_is_the_fastest_timed_with_more_than_one_child(tmp_path):
    """settings='fastest-tree': EAGLE-2's dynamic tree proper, for the bench's tree rows, taken from
    the head's timed table even where its fastest setting is a chain."""
    import json
    from speclab import load_drafter
    from speclab.methods.eagle import fastest_tree
    table = [dict(top_k=1, depth=12, total_tokens=12, min_confidence=None, speedup=3.0),
             dict(top_k=2, depth=8, total_tokens=16, min_confidence=None, speedup=2.5),
             dict(top_k=3, depth=6, total_tokens=16, min_confidence=0.1, speedup=2.4)]
    measured = dict(top_k=1, depth=12, total_tokens=12, min_confidence=None, table=table)
    assert fastest_tree(measured) == dict(top_k=2, depth=8, total_tokens=16, min_confidence=None)
    target = tiny_model("llama", layers=2, seed=0)
    EagleHead.for_target(target).save(tmp_path / "eagle")
    (tmp_path / "eagle" / "tree.json").write_text(json.dumps(measured))
    drafter = load_drafter("eagle", target, head=tmp_path / "eagle", settings="fastest-tree")
    assert (drafter.top_k, drafter.depth, drafter.total_tokens) == (2, 8, 16)
    assert load_drafter("eagle", target, head=tmp_path / "eagle").top_k == 1
    with pytest.raises(ValueError, match="no greedy setting with top_k > 1"):
        fastest_tree(dict(table=table[:1]))
    with pytest.raises(ValueError, match="settings must be one of"):
        load_drafter("eagle", target, head=tmp_path / "eagle", settings="widest")
