"""Chapter 12's decode kernels (split-KV and merge, grouped-query attention) against a float64 reference.

Without a GPU they run in Triton's interpreter on small fp32 problems; the @pytest.mark.gpu tests run fp16 and
bf16 with longer caches.
"""

import math

import pytest
import torch
import triton

from kernels import flash_decoding as fd

RTOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def reference(q, k_cache, v_cache, cache_lens, sm_scale=None):
    """(out, lse) in float64, one sequence and head at a time; rows that see no key give 0 and -inf."""
    batch, q_heads, n_q, d = q.shape
    group = q_heads // k_cache.shape[1]
    scale = 1 / math.sqrt(d) if sm_scale is None else sm_scale
    out = torch.zeros(q.shape, dtype=torch.float64)
    lse = torch.full((batch, q_heads, n_q), -math.inf, dtype=torch.float64)
    for b in range(batch):
        length = int(cache_lens[b])
        for h in range(q_heads):
            k = k_cache[b, h // group, :length].double().cpu()
            v = v_cache[b, h // group, :length].double().cpu()
            s = q[b, h].double().cpu() @ k.T * scale
            positions = torch.arange(n_q)[:, None] + length - n_q
            s = s.masked_fill(torch.arange(length)[None, :] > positions, -math.inf)
            for t in range(n_q):
                if torch.isfinite(s[t]).any():
                    lse[b, h, t] = torch.logsumexp(s[t], 0)
                    out[b, h, t] = torch.softmax(s[t], 0) @ v
    return out, lse


def make(batch, q_heads, kv_heads, n_q, capacity, d, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn((batch, q_heads, n_q, d), generator=g).to(device, dtype)
    k, v = (torch.randn((batch, kv_heads, capacity, d), generator=g).to(device, dtype) for _ in range(2))
    return q, k, v


def paged(k, v, lens, page_size, seed=0):
    """The same cache as pools of pages in a shuffled order, with a block table. Pages no sequence uses, and the
    unused rows of a sequence's last page, hold NaN; table entries past a sequence's length are -1."""
    batch, kv_heads, capacity, d = k.shape
    pages_per_seq = -(-capacity // page_size)
    total = batch * pages_per_seq + 3  # three spare pages that nobody uses
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed))
    table = order[:batch * pages_per_seq].view(batch, pages_per_seq).to(k.device, torch.int32)
    pools = []
    for cache in (k, v):
        pool = torch.full((total, kv_heads, page_size, d), float("nan"), dtype=cache.dtype, device=cache.device)
        for b in range(batch):
            for i in range(pages_per_seq):
                rows = min(page_size, int(lens[b]) - i * page_size)
                if rows > 0:
                    pool[table[b, i], :, :rows] = cache[b, :, i * page_size:i * page_size + rows]
        pools.append(pool)
    used = torch.arange(pages_per_seq, device=k.device) * page_size < lens.to(k.device)[:, None]
    return *pools, table.masked_fill(~used, -1)


def check(q, k, v, lens, page_size=None, **kwargs):
    """Decode, from a contiguous cache or (with a page_size) from the same cache in pages, against float64."""
    if page_size is None:
        out, lse = fd.decode(q, k, v, lens, return_lse=True, **kwargs)
    else:
        k_pool, v_pool, table = paged(k, v, lens, page_size)
        out, lse = fd.decode(q, k_pool, v_pool, lens, block_table=table, return_lse=True, **kwargs)
    ref_out, ref_lse = reference(q, k, v, lens.cpu(), kwargs.get("sm_scale"))
    assert out.shape == q.shape and out.dtype == q.dtype and not torch.isnan(out).any()
    err = (out.double().cpu() - ref_out).norm() / max(ref_out.norm(), 1e-30)
    assert err <= RTOL[q.dtype], f"relative error {err:.2e}"
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), seen), "rows that see no key must have lse = -inf, others finite"
    assert torch.allclose(lse.cpu().double()[seen], ref_lse[seen], atol=1e-4)
    assert torch.all(out.cpu()[~seen] == 0), "rows that see no key must be 0"
    return out


# ---------------------------------------------------------------------------------------------------
# On any machine (the interpreter without a GPU): fp32, small


@pytest.mark.parametrize("num_splits", [None, 1, 2, 3, 7])  # None: choose_splits; 7 splits of 130 keys: some empty
@pytest.mark.parametrize(("q_heads", "kv_heads"), [(4, 4), (4, 1), (8, 2)])  # MHA, MQA, GQA with groups of 4
def test_splits_and_groups_match_float64(num_splits, q_heads, kv_heads, device):
    q, k, v = make(2, q_heads, kv_heads, 1, 130, 32, torch.float32, device, seed=(num_splits or 0) + q_heads)
    check(q, k, v, torch.tensor([130, 77], device=device), num_splits=num_splits)


@pytest.mark.parametrize("n_q", [1, 3, 16])
def test_mixed_lengths_including_empty_and_shorter_than_the_queries(n_q, device):
    # Lengths 0 (nothing cached), 1, 2 (fewer keys than new queries: the first queries see none), 7 and 65.
    q, k, v = make(5, 4, 2, n_q, 80, 16, torch.float32, device, seed=n_q)
    out = check(q, k, v, torch.tensor([0, 1, 2, 7, 65], device=device), num_splits=2)
    assert torch.all(out[0] == 0)


def test_odd_head_dim_custom_scale_and_strided_queries(device):
    q, k, v = make(1, 4, 2, 2, 50, 24, torch.float32, device)
    q = torch.randn(1, 2, 4, 24, device=device).transpose(1, 2)  # strided: (B, Nq, H, D) memory seen as (B, H, Nq, D)
    check(q, k, v, torch.tensor([50], device=device), num_splits=2, sm_scale=0.3)


@pytest.mark.parametrize(("block_n", "num_stages"), [(16, 3), (64, 2)])  # the interpreter's plan: 128 keys, 3 stages
def test_every_tile_size_matches_float64(block_n, num_stages, device):
    q, k, v = make(2, 8, 2, 2, 150, 32, torch.float32, device, seed=block_n)
    check(q, k, v, torch.tensor([150, 40], device=device), num_splits=3, block_n=block_n, num_stages=num_stages)


@pytest.mark.parametrize(("page_size", "block_n", "num_splits"), [(16, 16, 1), (16, 128, 3), (32, 16, 4), (64, 32, 2)])
def test_paged_cache_matches_float64(page_size, block_n, num_splits, device):
    # Pages in a shuffled order, NaN in every page and row no sequence uses: a wrong page or row shows.
    q, k, v = make(3, 8, 2, 2, 100, 32, torch.float32, device, seed=page_size + block_n)
    check(q, k, v, torch.tensor([100, 0, 37], device=device), page_size=page_size, block_n=block_n,
          num_splits=num_splits)


def test_outputs_are_fully_written(device):
    # Poison the caching allocator: an element the kernels forget to write would come back as NaN.
    torch.full((1 << 20,), float("nan"), device=device)
    q, k, v = make(2, 8, 2, 4, 100, 32, torch.float32, device, seed=5)
    check(q, k, v, torch.tensor([100, 33], device=device), num_splits=4)


def test_choose_splits_fills_whole_waves_with_no_split_under_a_tile():
    # 8 programs per split: 16 splits are 128 programs, one wave of 132 SMs nearly full
    assert fd.choose_splits(batch=1, kv_heads=8, capacity=8192, sm_count=132) == 16
    assert fd.choose_splits(batch=1, kv_heads=8, capacity=1 << 17, sm_count=132) == 16
    # 32 programs: 4 splits fill one wave to 97%; 9 (the old rule's two per SM) would leave a third wave of 24
    assert fd.choose_splits(batch=1, kv_heads=32, capacity=32768, sm_count=132) == 4
    # two programs per SM double the slots, and so the splits
    assert fd.choose_splits(batch=1, kv_heads=32, capacity=32768, sm_count=132, programs_per_sm=2) == 8
    assert fd.choose_splits(batch=8, kv_heads=8, capacity=8192, sm_count=132) == 2  # 64 programs -> 128
    assert fd.choose_splits(batch=64, kv_heads=8, capacity=8192, sm_count=132) == 1  # 512 programs: 3.9 waves
    # 8 programs and a 1K cache: one tile per split, the most there are, fills the GPU best
    assert fd.choose_splits(batch=1, kv_heads=8, capacity=1024, sm_count=132) == 8
    assert fd.choose_splits(batch=1, kv_heads=8, capacity=300, sm_count=132) == 2  # two whole tiles of 128
    assert fd.choose_splits(batch=1, kv_heads=8, capacity=100, sm_count=132) == 1  # no split under a tile


def test_choose_tile_runs_short_splits_in_the_fewest_waves():
    per_sm = [1, 3, 5]  # 128 keys and 3 stages, 64 and 3, 64 and 2, at head dim 128 in fp16 (the tiles table)
    short = fd.SHORT_SPLIT
    assert fd.choose_tile(128, 132, per_sm, short) == 0  # one wave whatever the tile: the most bytes in flight wins
    assert fd.choose_tile(256, 132, per_sm, short) == 1  # two waves of one program per SM, or one of up to three
    assert fd.choose_tile(512, 132, per_sm, 1024) == 2  # 4, 2 or 1 waves
    assert fd.choose_tile(2048, 132, per_sm, 1024) == 2  # 16, 6 or 4 waves


def test_choose_tile_keeps_the_most_bytes_in_flight_for_long_splits():
    per_sm = [1, 3, 5]
    assert fd.choose_tile(512, 132, per_sm, fd.SHORT_SPLIT + 1) == 0  # 4 waves, but each program reads long
    assert fd.choose_tile(256, 132, per_sm, 131072) == 0


def test_programs_per_sm_counts_the_pipeline_and_the_staged_tiles():
    shared = 228 * 1024  # one H200 SM
    # Head dim 128, fp16, 16 rows: (2 x 2 x 128 x 128 + 16 x 256) x 2 bytes = 136 KiB, the compiled kernel's size
    assert fd.programs_per_sm(128, 3, 16, 128, 2, shared) == 1
    assert fd.programs_per_sm(64, 3, 16, 128, 2, shared) == 3  # 70 KiB
    assert fd.programs_per_sm(64, 2, 16, 128, 2, shared) == 5  # 38 KiB
    assert fd.programs_per_sm(64, 2, 16, 128, 4, shared) == 2  # fp32: twice the bytes
    assert fd.programs_per_sm(128, 3, 16, 128, 2, 0) == 1  # at least one, always


def test_programmatic_launch_only_on_a_hopper_gpu_outside_the_interpreter(monkeypatch):
    assert not fd.programmatic_launch(torch.device("cpu"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not fd.programmatic_launch(torch.device("cuda"))  # the interpreter cannot run gdc_wait, even on a GPU
    if torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        assert fd.programmatic_launch(torch.device("cuda")) == (torch.cuda.get_device_capability()[0] >= 9)


def test_plan_keeps_what_is_given_and_caps_the_tile_at_the_page():
    q = torch.zeros(1, 8, 1, 32)  # on the CPU: a stand-in GPU of two SMs with one program each
    assert fd.plan(q, 2, 1024) == (1, 128, 3)  # 2 programs fill both SMs
    assert fd.plan(q, 2, 1024, num_splits=5) == (5, 128, 3)
    assert fd.plan(q, 2, 1024, page_size=16) == (1, 16, 3)
    assert fd.plan(q, 2, 1024, block_n=32, num_stages=2) == (1, 32, 2)
    assert fd.plan(q, 2, 1024, page_size=16, block_n=64) == (1, 16, 3)


@pytest.mark.gpu
def test_plan_takes_the_tile_by_the_keys_each_split_reads():
    """On a GPU of about 132 SMs with 228 KiB of shared memory each (an H100 or H200): 512 programs at head dim 128 in
    fp16 take 64-key tiles with two stages, one wave, where each reads up to 2,048 keys, and 128-key tiles where it
    reads more (chapter 12's exercise 2)."""
    props = torch.cuda.get_device_properties(0)
    if not (128 <= props.multi_processor_count <= 144 and props.shared_memory_per_multiprocessor >= 228 * 1024):
        pytest.skip("the counts below are for a GPU of about 132 SMs with 228 KiB of shared memory each")
    q = torch.zeros(64, 32, 1, 128, device="cuda", dtype=torch.float16)
    for capacity in (1024, 2048):
        assert fd.plan(q, 8, capacity) == (1, 64, 2)
    for capacity in (2049, 8192, 32768):
        assert fd.plan(q, 8, capacity) == (1, 128, 3)


@pytest.mark.parametrize(("change", "error", "message"), [
    (lambda a: {**a, "k": a["k"][:, [0, 1, 1]], "v": a["v"][:, [0, 1, 1]]}, ValueError,
     r"query heads \(8\) must be a multiple of the KV heads \(3\)"),
    (lambda a: {**a, "q": a["q"].expand(2, 8, 17, 32)}, ValueError, "1 to 16 new queries"),
    (lambda a: {**a, "lens": a["lens"].float()}, ValueError, "cache_lens must be an integer tensor"),
    (lambda a: {**a, "lens": a["lens"][:1]}, ValueError, "one length per sequence"),
    (lambda a: {**a, "v": a["v"][:, :, :10]}, ValueError, "k_cache and v_cache must have one shape"),
    (lambda a: {**a, "q": a["q"].double()}, TypeError, "dtype float64"),
    (lambda a: {**a, "lens": a["lens"] + 1}, ValueError, r"between 0 and the cache's capacity 20, got 6 to 21"),
    (lambda a: {**a, "q": a["q"].repeat(1, 4, 16, 1)}, ValueError, "16 query heads per KV head x 16 new queries"),
    (lambda a: {**a, "block_n": 96}, ValueError, "block_n must be a power of two from 16 to 256, got 96"),
    (lambda a: {**a, "num_stages": 0}, ValueError, "num_stages must be a positive integer, got 0"),
    (lambda a: {**a, "num_splits": 0}, ValueError, "num_splits must be a positive integer, got 0"),
    (lambda a: {**a, "k": a["k"][:, :, :12], "v": a["v"][:, :, :12], "table": a["lens"][:, None]}, ValueError,
     "power-of-two page_size of at least 16"),
    (lambda a: {**a, "k": a["k"][:, :, :16], "v": a["v"][:, :, :16], "table": a["lens"][:, None].float()},
     ValueError, r"block_table must be an integer tensor \(batch=2, pages per sequence\)"),
    (lambda a: {**a, "k": a["k"][:, :, :16], "v": a["v"][:, :, :16], "table": torch.tensor([[0, 1], [2, 7]])},
     ValueError, "an index into the pool of 2 pages, got 0 to 2"),
])
def test_bad_input_gets_a_clear_error(change, error, message, device):
    q, k, v = make(2, 8, 2, 1, 20, 32, torch.float32, device)
    args = change({"q": q, "k": k, "v": v, "lens": torch.tensor([20, 5], device=device), "block_n": None,
                   "num_stages": None, "num_splits": None, "table": None})
    table = None if args["table"] is None else args["table"].to(device)
    with pytest.raises(error, match=message):
        fd.decode(args["q"], args["k"], args["v"], args["lens"], block_table=table, block_n=args["block_n"],
                  num_stages=args["num_stages"], num_splits=args["num_splits"])


# ---------------------------------------------------------------------------------------------------
# On a GPU: half precision, long caches, every split count


def test_a_planned_decoder_runs_step_after_step(device):
    """Plan once, then call every step with new queries and longer lengths written in place."""
    q, k, v = make(3, 8, 2, 1, 300, 32, torch.float32, device, seed=5)
    lens = torch.tensor([1, 40, 200], device=device, dtype=torch.int32)
    step = fd.Decoder(q, k, v, lens, num_splits=3, block_n=16, return_lse=True)
    for grown in range(3):
        lens += 7 * grown
        q.copy_(torch.randn(q.shape, generator=torch.Generator().manual_seed(grown)).to(device))
        out, lse = step(q, k, v, lens)
        ref_out, ref_lse = reference(q, k, v, lens.cpu())
        assert (out.double().cpu() - ref_out).norm() / ref_out.norm() <= RTOL[torch.float32]
        assert torch.allclose(lse.cpu().double(), ref_lse, atol=1e-4)


def test_a_planned_decoder_takes_new_tensors_and_unaligned_ones(device):
    """After its first call a Decoder launches through the compiled kernels' handles (on a GPU): new tensors at
    other addresses, and a query 2 bytes off 16-byte alignment (which the handle was not compiled for), still give
    the right answer."""
    q, k, v = make(2, 8, 2, 1, 300, 32, torch.float32, device, seed=6)
    lens = torch.tensor([300, 41], device=device, dtype=torch.int32)
    step = fd.Decoder(q, k, v, lens, num_splits=2, block_n=16)
    step(q, k, v, lens)
    spare = torch.empty(q.numel() + 1, device=device, dtype=q.dtype)
    unaligned = spare[1:].view(q.shape)  # same shape and strides, 4 bytes past an aligned address
    for queries in (q.clone() * 2, unaligned.copy_(q), q.clone() - 1):
        expected, _ = reference(queries, k, v, lens.cpu())
        out = step(queries, k.clone(), v.clone(), lens.clone())
        assert (out.double().cpu() - expected).norm() / expected.norm() <= RTOL[torch.float32]


def test_host_lengths_plan_for_the_keys_the_batch_holds():
    """A batch of two sequences on one KV head fills the interpreter's two stand-in SMs with one split each; told
    that one of them is empty, the plan splits the other in two."""
    q = torch.zeros(2, 4, 1, 32)
    assert fd.plan(q, 1, 1024) == (1, 128, 3)
    assert fd.plan(q, 1, 1024, host_lengths=[1024, 1024]) == (1, 128, 3)
    assert fd.plan(q, 1, 1024, host_lengths=[1024, 0]) == (2, 128, 3)
    assert fd.plan(q, 1, 1024, host_lengths=[0, 0]) == (1, 128, 3)  # nothing to read: as planned by the shapes


def test_choose_splits_counts_one_long_sequence_among_short_ones():
    """Llama-3.1-8B's 8 KV heads at batch 16, one sequence of 100,000 keys and fifteen of 2,048, on 132 SMs: by the
    shapes alone 128 programs fill a wave with one split, and 8 programs read the long sequence; counted by the
    keys held (1.3 sequences of 100,000), the long one gets 12 splits."""
    assert fd.choose_splits(16, 8, 100000, 132) == 1
    assert fd.choose_splits((100000 + 15 * 2048) / 100000, 8, 100000, 132) == 12


def test_resident_programs_take_the_least_of_shared_memory_registers_and_threads():
    shared = 228 * 1024  # one H200 SM
    assert fd.resident_programs(38 * 1024, 128, shared) == 4  # 5 by shared memory, 4 by registers (128 x 128 each)
    assert fd.resident_programs(38 * 1024, 121, shared) == 4  # registers are given in steps of 8 per thread
    assert fd.resident_programs(136 * 1024, 64, shared) == 1  # shared memory decides
    assert fd.resident_programs(0, 32, shared) == 16  # 2,048 threads per SM: 16 warpgroups
    assert fd.resident_programs(300 * 1024, 255, shared) == 1  # at least one, always


def test_a_decoder_checks_its_host_lengths_and_pdl(device):
    q, k, v = make(2, 4, 2, 1, 64, 16, torch.float32, device)
    lens = torch.tensor([10, 20], device=device, dtype=torch.int32)
    with pytest.raises(ValueError, match="host_lengths must give 2 lengths between 0 and the capacity 64"):
        fd.Decoder(q, k, v, lens, host_lengths=[10, 65])
    with pytest.raises(ValueError, match="host_lengths must give 2 lengths"):
        fd.Decoder(q, k, v, lens, host_lengths=[10])
    if not fd.programmatic_launch(q.device):
        with pytest.raises(ValueError, match="pdl=True needs a GPU of compute capability 9.0"):
            fd.Decoder(q, k, v, lens, pdl=True)
    for pdl in (False, None):
        expected, _ = reference(q, k, v, lens.cpu())
        out = fd.Decoder(q, k, v, lens, pdl=pdl, host_lengths=[10, 20])(q, k, v, lens)
        assert (out.double().cpu() - expected).norm() / expected.norm() <= RTOL[torch.float32]


def test_a_planned_decoder_refuses_other_shapes(device):
    q, k, v = make(2, 4, 2, 1, 64, 16, torch.float32, device)
    lens = torch.tensor([10, 20], device=device, dtype=torch.int32)
    step = fd.Decoder(q, k, v, lens)
    with pytest.raises(ValueError, match="differ from the planned ones; make a new Decoder"):
        step(q[:1], k[:1], v[:1], lens[:1])


def test_decode_keeps_plans_but_returns_new_tensors_every_call(device, monkeypatch):
    """decode() plans a shape once; each call still gets its own output, and a plan for other shapes is not reused
    for bad inputs (they are checked when their plan is made)."""
    monkeypatch.setattr(fd, "_plans", type(fd._plans)())
    monkeypatch.setattr(fd, "PLANS_KEPT", 2)
    q, k, v = make(2, 4, 2, 1, 64, 16, torch.float32, device, seed=3)
    lens = torch.tensor([10, 64], device=device, dtype=torch.int32)
    first = fd.decode(q, k, v, lens)
    second = fd.decode(q * 2, k, v, lens)
    assert first.data_ptr() != second.data_ptr() and len(fd._plans) == 1
    for out, queries in ((first, q), (second, q * 2)):
        expected, _ = reference(queries, k, v, lens.cpu())
        assert (out.double().cpu() - expected).norm() / expected.norm() <= RTOL[torch.float32]
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        fd.decode(q[:, :3], k, v, lens)
    fd.decode(q[:1], k[:1], v[:1], lens[:1])  # a second shape: a second plan
    fd.decode(torch.cat([q, q], dim=2), k, v, lens)  # a third (two new queries): the oldest plan is forgotten
    assert len(fd._plans) == 2 and all(key[0][0][0][0] == 1 or key[0][0][0][2] == 2 for key in fd._plans)


def test_split_ranges_follow_the_lengths_not_the_capacity(device):
    """64 keys in a cache for 1024: with 4 splits, every split reads a share of them (each
    split's partial state is finite); split by the capacity, three of the four would read nothing."""
    q, k, v = make(1, 2, 2, 1, 1024, 16, torch.float32, device)
    lens = torch.tensor([64], device=device, dtype=torch.int32)
    step = fd.Decoder(q, k, v, lens, num_splits=4, block_n=16)
    step(q, k, v, lens)
    assert torch.isfinite(step.lse_part).all(), "a split read no key"
    check(q, k, v, lens, num_splits=4, block_n=16)


@pytest.mark.gpu
def test_gpu_plan_counts_the_compiled_kernels_registers():
    """Llama-2-13B's 40 heads at batch 4 and 2,048 keys: the plan's programs per SM are what the compiled kernel's
    shared memory and registers allow, never more than the shared-memory estimate."""
    q = torch.zeros(4, 40, 1, 128, device="cuda", dtype=torch.bfloat16)
    splits, block_n, stages = fd.plan(q, 40, 2048)
    props = torch.cuda.get_device_properties(0)
    meta = fd.split_meta(q, 40, 2, block_n, stages, 0, fd.programmatic_launch(q.device))
    shared_used, registers = fd.compiled_resources(meta, q, 40)
    per_sm = fd.resident_programs(shared_used, registers, props.shared_memory_per_multiprocessor)
    assert 0 < registers <= 255 and per_sm <= fd.programs_per_sm(block_n, stages, 16, 128, 2,
                                                                 props.shared_memory_per_multiprocessor)
    first = fd.split_meta(q, 40, 2, *fd.TILES[0], 0, fd.programmatic_launch(q.device))
    first_per_sm = fd.resident_programs(*fd.compiled_resources(first, q, 40), props.shared_memory_per_multiprocessor)
    assert splits == fd.choose_splits(4, 40, 2048, props.multi_processor_count, fd.TILES[0][0], first_per_sm)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("page_size", [16, 128, 256])
def test_gpu_paged_decode(dtype, page_size):
    q, k, v = make(4, 32, 8, 1, 4097, 128, dtype, "cuda", seed=page_size)
    torch.full((1 << 26,), float("nan"), device="cuda")
    check(q, k, v, torch.tensor([4097, 7, 1, 0], device="cuda"), page_size=page_size)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("q_heads", "kv_heads", "n_q"), [(32, 32, 1), (32, 8, 1), (64, 8, 4), (8, 1, 16)])
@pytest.mark.parametrize("num_splits", [None, 1, 5, 200])  # 200 splits of 4097 keys: many are empty
def test_gpu_decode(dtype, q_heads, kv_heads, n_q, num_splits):
    q, k, v = make(4, q_heads, kv_heads, n_q, 4097, 128, dtype, "cuda", seed=q_heads + n_q)
    torch.full((1 << 26,), float("nan"), device="cuda")  # poisons the outputs and the partial states alike
    check(q, k, v, torch.tensor([4097, 7, 1, 0], device="cuda"), num_splits=num_splits)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("block_n", "num_stages"), fd.TILES)
def test_gpu_every_tile(dtype, block_n, num_stages):
    q, k, v = make(3, 32, 8, 2, 4097, 128, dtype, "cuda", seed=block_n + num_stages)
    torch.full((1 << 26,), float("nan"), device="cuda")
    check(q, k, v, torch.tensor([4097, 130, 1], device="cuda"), num_splits=3, block_n=block_n, num_stages=num_stages)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize(("block_n", "num_stages"), [*fd.TILES, (16, 3), (32, 2)])
def test_gpu_programs_per_sm_estimate_matches_the_compiled_kernel(dtype, head_dim, block_n, num_stages):
    # One query per sequence in groups of 4: 16 rows, as in every shape of the decode benchmark
    from book.bench.decode import compiled_resources

    q, k, v = make(1, 32, 8, 1, 512, head_dim, dtype, "cuda")
    lens = torch.tensor([512], device="cuda")
    used = compiled_resources(lambda: fd.decode(q, k, v, lens, num_splits=2, block_n=block_n,
                                                num_stages=num_stages))
    if used is None:
        pytest.skip("this Triton keeps its compiled kernels where compiled_resources does not look")
    shared = used["shared_bytes"]
    per_sm = torch.cuda.get_device_properties(0).shared_memory_per_multiprocessor
    assert fd.programs_per_sm(block_n, num_stages, 16, head_dim, 2, per_sm) == max(1, per_sm // (shared + 1024))


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 256])
@pytest.mark.parametrize(("q_heads", "kv_heads"), [(16, 16), (28, 4), (40, 8), (32, 8), (16, 1)])  # groups 1 to 16
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_gpu_every_head_dim_and_group_compiles_and_is_right(head_dim, q_heads, kv_heads, dtype):
    """No supported input fails to compile: the plan keeps only tiles whose shared memory fits a program."""
    q, k, v = make(2, q_heads, kv_heads, 1, 2049, head_dim, dtype, "cuda", seed=head_dim)
    check(q, k, v, torch.tensor([2049, 700], device="cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 256])
@pytest.mark.parametrize(("q_heads", "kv_heads", "n_q"), [(8, 8, 1), (32, 2, 8)])  # 1 row, and 16 x 8 = 128 rows
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_gpu_every_head_dim_runs_its_largest_fitting_tile(head_dim, q_heads, kv_heads, n_q, dtype):
    """Each head dim at the largest tile the compiled kernel fits: the plan starts from the largest tile the count
    lets through and drops any the GPU refuses (at head dim 256 with 128 rows the count passes (64, 3), the compiled
    kernel needs more); the default call then runs and is right, and forcing a refused tile is a clear error."""
    per_program = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    rows, pad = fd._rows(q_heads // kv_heads * n_q), max(triton.next_power_of_2(head_dim), 16)
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    fitting = [t for t in fd.TILES + fd.SMALL_TILES if fd.shared_bytes(*t, rows, pad, dtype_bytes) <= per_program]
    assert fitting, f"no tile fits at head dim {head_dim} with {rows} rows"
    q, k, v = make(2, q_heads, kv_heads, n_q, 1500, head_dim, dtype, "cuda", seed=head_dim + n_q)
    lens = torch.tensor([1500, 333], device="cuda")
    check(q, k, v, lens)
    block_n, num_stages = max(fitting, key=lambda t: t[0] * t[1])  # the most keys in flight
    try:
        check(q, k, v, lens, block_n=block_n, num_stages=num_stages)
    except ValueError as error:
        assert "fits a program's shared memory" in str(error)


@pytest.mark.gpu
@pytest.mark.parametrize("paged_size", [None, 64])
def test_gpu_a_captured_step_replays_with_new_lengths_and_queries(paged_size):
    q, k, v = make(4, 32, 8, 1, 4096, 128, torch.bfloat16, "cuda", seed=9)
    lens = torch.tensor([4096, 100, 2048, 1], device="cuda", dtype=torch.int32)
    table = None
    if paged_size is not None:
        k, v, table = paged(k, v, torch.full((4,), 4096), paged_size)
    graph = fd.DecodeGraph(q, k, v, lens, block_table=table)
    for new_lens in ([10, 4096, 3000, 2], [4096, 4096, 1, 1]):
        lens.copy_(torch.tensor(new_lens, device="cuda", dtype=torch.int32))
        q.copy_(torch.randn(q.shape, device="cuda", dtype=q.dtype))
        out = graph.replay().clone()
        expected = fd.decode(q, k, v, lens, block_table=table)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
