"""Token trees: parents, depths, the tree attention mask and positions, medusa_choices."""
import pytest
import torch

from speclab import trees


def test_a_chain_is_the_tree_whose_nodes_hang_one_under_another():
    assert trees.chain_parents(4) == [-1, 0, 1, 2]
    assert trees.is_chain([-1, 0, 1]) and not trees.is_chain([-1, -1])
    assert trees.depths([-1, 0, 1]) == [1, 2, 3]


def test_the_chain_mask_is_the_causal_mask():
    sees = trees.ancestor_matrix(trees.chain_parents(5))
    assert torch.equal(sees, torch.tril(torch.ones(6, 6, dtype=torch.bool)))


def test_each_node_sees_the_prefix_the_root_its_ancestors_and_itself():
    parents = [-1, -1, 0, 0, 1, 2]  # root -> 0, 1; 0 -> 2, 3; 1 -> 4; 2 -> 5
    mask = trees.tree_attention_mask(parents, cached=3, dtype=torch.float16)
    assert mask.shape == (1, 1, 7, 10) and mask.dtype == torch.float16
    visible = mask[0, 0] == 0
    assert visible[:, :3].all()  # the cached prefix
    rows = {j: set(torch.nonzero(visible[j, 3:]).flatten().tolist()) for j in range(7)}
    # rows and columns over [root, node 0, ..., node 5]
    assert rows[0] == {0} and rows[1] == {0, 1} and rows[2] == {0, 2}
    assert rows[3] == {0, 1, 3} and rows[5] == {0, 2, 5} and rows[6] == {0, 1, 3, 6}
    assert (mask[0, 0][~visible] == torch.finfo(torch.float16).min).all()
    assert trees.tree_position_ids(parents, 3).tolist() == [[3, 4, 4, 5, 5, 5, 6]]


def test_paths_leaves_and_pruning():
    parents = [-1, -1, 0, 0, 1, 2]
    assert trees.children(parents) == [[0, 1], [2, 3], [4], [5], [], [], []]
    assert trees.path_to(parents, 5) == [0, 2, 5] and trees.path_to(parents, -1) == []
    assert trees.leaf_paths(parents) == [[0, 3], [1, 4], [0, 2, 5]]
    assert trees.prune_to_depth(parents, 2) == ([0, 1, 2, 3, 4], [-1, -1, 0, 0, 1])
    assert trees.kept_positions(4, [1, 4]) == [0, 1, 2, 3, 4, 6, 9]


def test_medusa_choices_become_parents_and_ranks():
    parents, ranks = trees.tree_from_choices([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    assert parents == [-1, -1, 0, 0, 1, 2] and ranks == [0, 1, 0, 1, 0, 0]


@pytest.mark.parametrize("parents, message", [
    ([0], "parent"), ([-1, 2, 0], "earlier node"), ([-1, -2], "parent"),
])
def test_bad_parents_are_refused(parents, message):
    with pytest.raises(ValueError, match=message):
        trees.check_parents(parents)


def test_bad_medusa_choices_are_refused():
    with pytest.raises(ValueError, match="no parent"):
        trees.tree_from_choices([(0,), (1, 0)])
    with pytest.raises(ValueError, match="ranks"):
        trees.tree_from_choices([(0,), ()])
