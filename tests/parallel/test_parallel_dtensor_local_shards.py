"""The DTensor engine's local-shard path (parallel/_dtensor.py) on 4 real gloo ranks:
the program body runs on each rank's own shards with explicit all-reduces, and its
outputs and the inputs' gradients (torch.autograd outside the xmap) equal the vectorized
run's -- ties and NaNs of pmax/pmin across ranks, integer/bool/complex psums, replicated
and sharded outputs, axes over two mesh dims, nx.grad around the xmap, DTensor outputs
-- the collectives that move values along a split axis (all_gather, ppermute, ...) and
ops along one (named reductions, softmax), while a program it cannot run (a collective
inside a derivative taken within the body) falls back to the DTensor path once and is
remembered.
"""
from __future__ import annotations

import os

import pytest
from _ranks import launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(400)]

HERE = os.path.dirname(os.path.abspath(__file__))
COMPARED = ["pmax_ties", "pmin_ties", "pmax_nan", "pmax_two_mesh_dims", "pmin_two_axes",
            "psum_int64", "psum_bool", "psum_complex64", "pmax_bool",
            "replicated_and_sharded", "pdot_psum_2d", "axis_index", "fold_decision"]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch(os.path.join(HERE, "_local_shards_worker.py"), 4,
                  tmp_path_factory.mktemp("local_shards"), timeout=300)


UNIFORM = ["neg_pmean", "pmean_reshaped", "psum_two_outputs", "psum_used_again",
           "psum_times_local", "two_mesh_dims", "dtensor_output"]


@pytest.mark.parametrize("case", COMPARED + [f"uniform_{c}" for c in UNIFORM])
def test_local_shards_equal_vectorized(ranks, case):
    for r, res in enumerate(ranks):
        got = res[case]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


MOVES = ["all_gather_matmul", "all_gather_stacked", "psum_scatter", "psum_scatter_untiled",
         "all_to_all", "ppermute_ring", "pshuffle", "gather_then_all_to_all_unmapped",
         "all_gather_two_axes"]


@pytest.mark.parametrize("mesh", ["1d", "2x2", "4x1x1"])
@pytest.mark.parametrize("case", MOVES)
def test_collectives_moving_values_run_on_local_shards(ranks, case, mesh):
    """all_gather, psum_scatter, all_to_all, ppermute, pshuffle over a split axis: the
    axis gathered whole, the collective computed, the rank's chunk kept; outputs and
    gradients equal the vectorized run's on every mesh (a size-1 mesh dim included)."""
    for r, res in enumerate(ranks):
        got = res[f"moves_{case}_{mesh}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


@pytest.mark.parametrize("mesh", ["1d", "2x2"])
@pytest.mark.parametrize("case", ["sum_broadcast", "softmax", "cumsum", "variance_loss", "amax",
                                  "logsumexp", "positional"])
def test_ops_along_a_split_axis_run_on_local_shards(ranks, case, mesh):
    """A named reduction or dim-wise op along a split axis: the axis gathered whole, the
    op, the rank's chunk kept; outputs and gradients equal the vectorized run's."""
    for r, res in enumerate(ranks):
        got = res[f"named_{case}_{mesh}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


@pytest.mark.parametrize("mesh", ["1d", "2x2"])
@pytest.mark.parametrize("case", ["psum_both", "pmean_loop", "pdot_mesh", "gather_mesh",
                                  "named_op_mesh", "loss"])
def test_serial_loop_chunks_run_on_local_shards(ranks, case, mesh):
    """A SerialLoop axis beside mesh axes: each chunk on this rank's shards (the loop's
    collectives replayed across chunks, the mesh's across ranks), as the vectorized run."""
    for r, res in enumerate(ranks):
        got = res[f"loop_{case}_{mesh}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] >= 2, (r, got)


@pytest.mark.parametrize("case", ["mesh_a", "mesh_c"])
def test_pmax_over_a_loop_and_a_mesh_axis_shares_its_cotangent(ranks, case):
    for r, res in enumerate(ranks):
        got = res[f"loop_pmax_{case}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] >= 2, (r, got)


@pytest.mark.parametrize("case", [f"{p}_{a}" for p in ("psum_both", "pmean_loop", "pdot_mesh",
                                                       "loss", "index", "pmax")
                                  for a in ("a", "c")])
def test_an_axis_both_looped_and_on_the_mesh_runs_on_local_shards(ranks, case):
    for r, res in enumerate(ranks):
        got = res[f"loop_and_mesh_{case}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] >= 2, (r, got)


@pytest.mark.parametrize("case", ["all_gather_matmul", "ppermute_ring", "psum_scatter"])
def test_second_derivatives_through_moving_collectives(ranks, case):
    for r, res in enumerate(ranks):
        got = res[f"moves_twice_{case}"]
        assert got["err"] < 1e-10 and got["local"] >= 1, (r, got)


@pytest.mark.parametrize("case", ["compiled_step", "compiled_loss_backward"])
def test_torch_compile_of_a_step_over_a_mesh_call_compiles_the_call(ranks, case):
    """torch.compile of nx.value_and_grad(mesh xmap), and of a loss over a mesh xmap
    differentiated by .backward() outside: four calls with new values equal the
    vectorized run's, and the mesh call runs as nx.jit's compiled program -- the
    local-shard engine runs only while it is traced, never per call."""
    for r, res in enumerate(ranks):
        got = res[case]
        assert got["err"] < 1e-12 and 1 <= got["local"] <= 2, (r, got)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("case", ["psum", "pmean_sq", "gather", "softmax", "ppermute", "pmax"])
def test_nx_jit_of_a_mesh_call_compiles_each_ranks_program(ranks, case, backend):
    """nx.jit traces each rank's local program, its collectives in the graph (the
    DeviceMesh is built outside the trace): values and gradients of three calls with new
    inputs equal the vectorized run's, from one program."""
    for r, res in enumerate(ranks):
        got = res[f"jit_{case}_{backend}"]
        assert got["err"] < 1e-12 and got["programs"] == 1, (r, got)


@pytest.mark.parametrize("case,backend", [
    (c, "eager") for c in ("psum", "pmean_sq", "gather", "softmax", "ppermute", "pmax")
] + [("psum", "inductor"), ("gather", "inductor")])
def test_nx_jit_of_a_mesh_loss_differentiated_outside_compiles(ranks, case, backend):
    """A jitted mesh loss whose .backward() is called outside: AOT autograd would
    differentiate the rank's aten graph anew and miss the collectives' transposes, so
    nx.jit traces it with its backward and compiles a forward and a backward program
    (transforms/_jit_program.py); three calls with new values, one program, every call
    compiled, values and gradients the vectorized run's."""
    for r, res in enumerate(ranks):
        got = res[f"jit_differentiated_outside_{case}_{backend}"]
        assert got["err"] < 1e-12, (r, got)
        assert got["stats"]["programs"] == 1 and got["stats"]["compiled"] == 3, (r, got)
        assert got["stats"]["inline"] == 0, (r, got)


def test_nx_jit_of_a_step_taking_sharded_state_compiles_on_the_shards(ranks):
    """Sharded parameters (DTensors) into nx.jit(value_and_grad(mesh xmap)): one program
    of the rank's shards serves the three calls, and the gradients come back as DTensors
    laid out like the parameters, equal to the vectorized run's."""
    for r, res in enumerate(ranks):
        got = res["jit_sharded_state"]
        assert got["err"] < 1e-12, (r, got)
        assert got["stats"]["programs"] == 1 and got["stats"]["compiled"] == 3, (r, got)
        assert got["stats"]["inline"] == 0, (r, got)
        for layout in got["layouts"]:
            assert layout == ["DTensor", "(Replicate(), Shard(dim=1))", [3, 2]], (r, layout)


def test_nx_jit_of_a_mesh_loss_on_sharded_state_differentiated_outside(ranks):
    """The jitted loss alone, .backward() outside: compiled (its forward and backward
    programs on the rank's shards), the gradients reach the sharded parameters, equal to
    the vectorized run's."""
    for r, res in enumerate(ranks):
        got = res["jit_sharded_loss_backward"]
        assert got["err"] < 1e-12, (r, got)
        assert got["stats"]["compiled"] == 1 and got["stats"]["inline"] == 0, (r, got)


def test_nx_jit_of_a_mesh_call_whose_trace_fails_on_one_rank_fails_on_all(ranks):
    """Each rank traces its own shards; when one rank's trace fails, the ranks learn it
    before running anything (one all-gather per new program) and every one raises an
    AxisResourceError naming it -- none waits in a collective the failed rank never
    joins (the mesh oracle found such a hang: a torch assert on one rank's trace)."""
    for r, res in enumerate(ranks):
        got = res["jit_fails_on_one_rank"]
        assert got["error"] == "AxisResourceError", (r, got)
        assert "failed on rank(s) [3]" in got["message"], (r, got)
    assert "rank 3 refuses" in ranks[3]["jit_fails_on_one_rank"]["message"]


def test_nx_jit_keys_its_programs_by_the_mesh_in_scope(ranks):
    for r, res in enumerate(ranks):
        got = res["jit_on_two_meshes"]
        assert got["err"] < 1e-12 and got["programs"] == 2, (r, got)


def test_eval_shape_of_a_mesh_call_gives_the_shapes(ranks):
    """The shapes and dtypes of the vectorized run's results (resources change none)."""
    for r, res in enumerate(ranks):
        got = res["eval_shape_step"]
        assert got["got"] == got["want"] and got["want"] == [[[], "torch.float64"],
                                                             [[3], "torch.float64"]], (r, got)


@pytest.mark.parametrize("mesh", ["1d", "2x2"])
@pytest.mark.parametrize("case", ["one_hot_pick", "vocab_ce", "einsum_contract"])
def test_a_vocabulary_split_over_the_mesh(ranks, case, mesh):
    for r, res in enumerate(ranks):
        got = res[f"vocab_{case}_{mesh}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


def test_a_ppermute_in_a_derivative_within_the_body_runs_on_local_shards(ranks):
    for r, res in enumerate(ranks):
        got = res["fallback_ppermute_grad"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


@pytest.mark.parametrize("case", ["2x2", "one", "loop"])
def test_axis_index_of_a_tuple_of_split_axes_runs_on_local_shards(ranks, case):
    for r, res in enumerate(ranks):
        got = res[f"tuple_index_{case}"]
        assert got["out_err"] == 0 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] >= 1, (r, got)


@pytest.mark.parametrize("case", ["psum", "pmean", "pmax", "pdot", "all_gather", "ppermute",
                                  "psum_scatter", "softmax", "jacrev", "jacfwd", "vmap"])
def test_a_jvp_or_vmap_within_the_body_runs_on_local_shards(ranks, case):
    for r, res in enumerate(ranks):
        got = res[f"inner_jvp_{case}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


def test_a_derivative_within_the_body_runs_on_local_shards(ranks):
    for r, res in enumerate(ranks):
        got = res["inner_grad_psum"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


@pytest.mark.parametrize("case", ["shared_mesh_axis", "shared_mesh_axis_both",
                                  "shared_mesh_axis_pdot"])
def test_an_all_reduce_never_mixes_axes_on_one_mesh_axis(ranks, case):
    for r, res in enumerate(ranks):
        got = res[case]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)


@pytest.mark.parametrize("case", ["jvp", "nx_vmap", "torch_vmap", "jacfwd", "hessian",
                                  "vmap_grad"])
def test_vmap_and_forward_mode_around_a_mesh_call_run_on_local_shards(ranks, case):
    for r, res in enumerate(ranks):
        got = res[f"around_{case}"]
        assert got["err"] < 1e-12, (r, got)
        assert got["local"] >= 1, (r, got)


@pytest.mark.parametrize("case", ["outer_nx_grad", "outer_nx_grad_pmax"])
def test_grad_around_the_xmap_runs_on_local_shards(ranks, case):
    for r, res in enumerate(ranks):
        assert res[case]["err"] < 1e-12 and res[case]["local"] == 1, (r, res[case])


def test_dtensor_outputs_backward(ranks):
    for r, res in enumerate(ranks):
        got = res["dtensor_outputs"]
        assert got["type"] == "DTensor" and got["err"] < 1e-12 and got["local"] == 1, (r, got)


@pytest.mark.parametrize("case", UNIFORM)
def test_a_cotangent_the_same_on_every_rank_is_not_all_reduced(ranks, case):
    """A replicated value's cotangent is the whole on every rank (its named shape says it
    is replicated), so psum's transpose hands it on with no round trip -- through negation,
    addition, reshapes, the pmean's division -- and a psum result that meets the split
    values again (each rank's instances use it) has the parts of its cotangent summed
    there: one all-reduce, besides the weights' bucket."""
    for r, res in enumerate(ranks):
        got = res[f"uniform_{case}"]
        assert got["backward_all_reduces"] == got["want_all_reduces"], (r, got)


def test_laid_out_dtensor_inputs_go_straight_to_their_shards(ranks):
    """DTensors laid out as the plan wants enter the body as their local shards and their
    gradients come back laid out like them, equal to the vectorized run's: two dtypes,
    an unused parameter (no gradient: a zero one would move it under Adam), one passed
    twice (the sum), one split over both mesh dims (no reduction)."""
    for r, res in enumerate(ranks):
        got = res["laid_out_dtensors"]
        assert got["err"] < 1e-5 and got["out_err"] < 1e-5, (r, got)
        assert got["placements"] == [["S(0)", "R"], ["R", "R"], ["S(1)", "S(0)"], None], (r, got)
        assert got["dtypes"] == ["torch.float32", "torch.float64", "torch.float32", None]
        assert got["local"] == 1 and got["sharded"] == 6, (r, got)


@pytest.mark.parametrize("case", ["broadcast_residual_1d", "broadcast_residual_2d",
                                  "broadcast_after_pmean_1d", "broadcast_mixed_uses"])
def test_a_broadcast_value_sums_its_cotangent_where_it_pays(ranks, case):
    """Megatron's f: a replicated value computed from a psum and broadcast into a
    column-parallel pdot has its cotangent summed there, so the cotangents above it are
    the same on every rank (psum's transposes cost nothing, the layer norm above gets a
    whole gradient); every other use of the value -- a split product, a user's Function,
    a second pdot -- stays exact."""
    for r, res in enumerate(ranks):
        got = res[case]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] == 1, (r, got)
        if "want_all_reduces" in got:
            assert got["backward_all_reduces"] == got["want_all_reduces"], (r, got)


def test_generated_residual_programs_equal_vectorized(ranks):
    """Random stacks of residual steps (blocks using the stream's layer norm once or
    twice, elementwise steps, split products, a user's Function; a loss or the stream as
    the output) on a 1-d and a 2x2 mesh: outputs and gradients equal the vectorized run's,
    wherever the cotangents were summed."""
    for r, res in enumerate(ranks):
        for program, err in res["broadcast_programs"].items():
            assert 0 <= err < 1e-10, (r, program, err)


@pytest.mark.parametrize("case", ["1d", "2d", "2d_dtensors"])
def test_a_gradient_differentiated_again_equals_vectorized(ranks, case):
    """create_graph through the local-shard path: a replicated input's gradient is a full
    output of the first backward (its cotangent the same on every rank, not a share) --
    on the 1-d mesh the second derivative came out 4x along it, silently."""
    for r, res in enumerate(ranks):
        got = res[f"double_backward_{case}"]
        assert got["err"] < 1e-10 and got["local"] == 1, (r, got)


@pytest.mark.parametrize("case", ["dynamic_slice", "reduce_axes", "dropped_copies",
                                  "two_argnums", "pdot_loop", "custom_jvp_in_vjp",
                                  "reduce_axes_mesh_and_loop"])
def test_a_replicated_value_meeting_split_ones_gets_its_whole_gradient(ranks, case):
    """Outputs and input gradients equal the vectorized run's where a replicated value
    meets split ones outside the dispatcher (slicing, nx.grad's own steps, a loop's pdot,
    a pullback's cotangent lacking the split axis -- its outer gradient; reduce_axes over
    an axis both on the mesh and in a loop)."""
    for r, res in enumerate(ranks):
        got = res[f"replicated_meets_{case}"]
        assert got["out_err"] < 1e-12 and got["grad_err"] < 1e-12, (r, got)
        assert got["local"] >= 1, (r, got)
