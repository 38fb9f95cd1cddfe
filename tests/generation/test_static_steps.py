"""Static-shape one-token steps (``cuda_graphs``): the step of a fixed-capacity cache with
the position as a tensor must give the eager step's logits, for GPT-2 and Qwen3 (grouped
keys/values and a sliding window too), one row and n rows; a call too long for any static cache takes the eager steps; and the CUDA-graph
wrapper's control flow (warm-up, one capture, a replay per step) is checked here with a
stand-in for ``torch.cuda``."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from codeparrot.errors import ConfigError
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation import static_step as st
from codeparrot.generation.decoder import LeanSteps
from codeparrot.generation.qwen3 import Qwen3Decoder
from codeparrot.models.presets import ModelPreset, build_model

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n"
TWO_LAYER_QWEN = ModelPreset(
    "test-qwen", 2, 4, 64, 256, 0.0, "test", 3e-3, architecture="qwen3", intermediate_size=176
)
ATOL = 1e-4  # as the lean decoders' tests compare logits


def peaked(model):
    with torch.no_grad():  # weights far from the initialisation: distinct, peaked logits
        for p in model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    return model


@pytest.fixture(scope="module")
def gpt2_engine(tiny_checkpoint: Path) -> Engine:
    engine = Engine.load(tiny_checkpoint, dtype="float32", quantize="none", lean_load=False)
    peaked(engine.model)
    return engine


@pytest.fixture(scope="module")
def qwen_engine(tiny_checkpoint: Path) -> Engine:
    from codeparrot.models.checkpoint import load_tokenizer

    tokenizer = load_tokenizer(tiny_checkpoint)
    model = peaked(build_model(TWO_LAYER_QWEN, tokenizer, seed=2)).eval()
    engine = Engine(model, tokenizer)
    assert isinstance(engine.decoder.lean, Qwen3Decoder)
    return engine


@pytest.fixture(scope="module")
def windowed_engine(tiny_checkpoint: Path) -> Engine:
    """A Qwen3 with grouped keys/values (4 query heads, 2 key/value heads) whose second
    layer sees a sliding window of 8 positions."""
    import transformers

    from codeparrot.models.checkpoint import load_tokenizer

    tokenizer = load_tokenizer(tiny_checkpoint)
    config = transformers.Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        use_sliding_window=True, sliding_window=8, max_window_layers=1,
    )  # fmt: skip
    torch.manual_seed(3)
    engine = Engine(peaked(transformers.Qwen3ForCausalLM(config).eval()), tokenizer)
    assert [block.window for block in engine.decoder.lean.blocks] == [None, 8]
    return engine


def static_twin(engine: Engine, cuda=None) -> Engine:
    """An engine over the same model whose steps are the static ones."""
    twin = Engine(engine.model, engine.tokenizer, cuda_graphs=True)
    twin.decoder.static_slots.cuda = cuda
    return twin


@pytest.mark.parametrize("name", ["gpt2_engine", "qwen_engine", "windowed_engine"])
def test_the_static_step_gives_the_eager_logits_over_a_greedy_completion(request, name):
    engine = request.getfixturevalue(name)
    decoder = engine.decoder.lean
    ids = torch.tensor([engine.tokenizer(PROMPT)["input_ids"]])
    T = ids.size(1)
    with torch.inference_mode():
        eager = decoder.new_cache(1, T + 30)
        logits = decoder.forward(ids, eager)
        prompt = decoder.new_cache(1, T)
        decoder.forward(ids, prompt)
        static = st.StaticCache(decoder, 1, 256)
        static.load_prompt(prompt, T)
        tokens = []
        for _ in range(30):  # 30 greedy tokens, each step's logits compared
            token = logits.argmax(-1)
            tokens.append(int(token))
            logits = decoder.forward(token.view(1, 1), eager)
            static.ids.copy_(token)
            got = st.static_step(decoder, static)
            assert got.shape == logits.shape
            assert torch.allclose(got.float(), logits.float(), atol=ATOL)
    assert int(static.position) == T + 30
    assert len(set(tokens)) > 1  # a completion, not one token repeated


@pytest.mark.parametrize("name", ["gpt2_engine", "qwen_engine", "windowed_engine"])
def test_n_rows_of_one_prompt_step_as_the_eager_shared_prefix(request, name):
    engine = request.getfixturevalue(name)
    decoder = engine.decoder.lean
    ids = torch.tensor([engine.tokenizer(PROMPT)["input_ids"]])
    T = ids.size(1)
    rows = torch.tensor([3, 17, 42])
    with torch.inference_mode():
        prompt = decoder.new_cache(1, T)
        decoder.forward(ids, prompt)
        shared = decoder.new_cache(3, 4, prefix=prompt.view(T))
        static = st.StaticCache(decoder, 3, 256)
        static.load_prompt(prompt, T)
        for step in range(4):  # each row its own tokens
            expected = decoder.forward((rows + step).view(3, 1), shared)
            static.ids.copy_(rows + step)
            assert torch.allclose(st.static_step(decoder, static), expected, atol=ATOL)


def test_a_static_cache_refuses_what_it_cannot_hold(gpt2_engine):
    decoder = gpt2_engine.decoder.lean
    with pytest.raises(ValueError, match="exceeds the model's context of 256"):
        st.StaticCache(decoder, 1, 512)
    cache = st.StaticCache(decoder, 1, 8)
    with torch.inference_mode():
        prompt = decoder.new_cache(1, 8)
        decoder.forward(torch.zeros((1, 8), dtype=torch.long), prompt)
        with pytest.raises(ValueError, match=r"a prompt of 8 tokens leaves no room .* of 8"):
            cache.load_prompt(prompt, 8)
        cache.load_prompt(prompt, 7)
        slot = st.StaticSlot(decoder, 1, 8, None)
        slot.cache = cache
        lean = LeanSteps(gpt2_engine.decoder, [1] * 7, 1, 1)
        lean.cache = prompt
        steps = st.StaticSteps(lean, slot, 1, 8)
        steps.length = 7
        steps.decode(torch.zeros(1, dtype=torch.long))  # position 7: the last one
        with pytest.raises(RuntimeError, match="static cache of 8 positions is full"):
            steps.decode(torch.zeros(1, dtype=torch.long))


def test_a_call_longer_than_any_static_cache_takes_the_eager_steps(gpt2_engine, monkeypatch):
    twin = static_twin(gpt2_engine)
    slots = twin.decoder.static_slots
    assert slots.capacity_for(10) == 256 and slots.capacity_for(257) is None
    monkeypatch.setattr(slots, "max_capacity", 16)
    settings = GenerationConfig(max_new_tokens=20, temperature=0, stop_at_eos=False, heal=False)
    assert isinstance(twin.decoder.steps([1, 2, 3], 1, 20), LeanSteps)
    (ours,) = twin.generate(PROMPT, settings)
    (eager,) = gpt2_engine.generate(PROMPT, settings)
    assert ours.text == eager.text and ours.new_tokens == 20
    assert slots.shapes() == []  # no static cache was made for it


@pytest.mark.parametrize("name", ["gpt2_engine", "qwen_engine"])
def test_the_engine_on_static_steps_writes_the_eager_text(request, name):
    engine = request.getfixturevalue(name)
    twin = static_twin(engine)
    greedy = GenerationConfig(max_new_tokens=30, temperature=0, stop_at_eos=False, heal=False)
    (eager,) = engine.generate(PROMPT, greedy)
    (ours,) = twin.generate(PROMPT, greedy)
    assert ours.text == eager.text and ours.new_tokens == 30
    # n samples of one prompt in one batch of the slot's shape (token healing on); rows that
    # stop early stay in the batch, their logits dropped
    sampled = GenerationConfig(max_new_tokens=24, temperature=1.0, n=6, seed=3, stop=("\n",))
    eager = engine.generate(PROMPT, sampled)
    ours = twin.generate(PROMPT, sampled)
    assert [c.text for c in ours] == [c.text for c in eager]
    assert [c.finish_reason for c in ours] == [c.finish_reason for c in eager]
    assert [c.new_tokens for c in ours] == [c.new_tokens for c in eager]
    assert min(c.new_tokens for c in ours) < 12  # rows left the call at different steps
    assert twin.decoder.static_slots.shapes() == [(1, 256), (6, 256)]


def test_a_slot_serves_one_call_at_a_time_and_comes_back(gpt2_engine):
    twin = static_twin(gpt2_engine)
    slots = twin.decoder.static_slots
    first = twin.decoder.steps([1, 2, 3], 2, 8)
    assert isinstance(first, st.StaticSteps)
    # another call of the same shape meanwhile: the eager steps
    assert isinstance(twin.decoder.steps([4, 5], 2, 8), LeanSteps)
    first.close()
    first.close()  # once
    assert isinstance(twin.decoder.steps([4, 5], 2, 8), st.StaticSteps)  # (left held)
    # a stream abandoned half way gives its slot back when closed
    settings = GenerationConfig(max_new_tokens=20, temperature=0, stop_at_eos=False, heal=False)
    events = twin.stream(PROMPT, settings)
    next(events)
    assert not isinstance(twin.decoder.steps([1], 1, 20), st.StaticSteps)
    events.close()
    assert isinstance(twin.decoder.steps([1], 1, 20), st.StaticSteps)
    assert len(slots.shapes()) == 2


class FakeCuda:
    """``torch.cuda`` as the capture uses it: a captured call runs again at each replay."""

    def __init__(self) -> None:
        self.captures = 0
        self.replays = 0
        self.calls_outside = 0  # eager calls before a capture
        self._capturing: FakeGraph | None = None

    class Stream:
        def wait_stream(self, other) -> None:
            pass

    def current_stream(self) -> FakeCuda.Stream:
        return FakeCuda.Stream()

    @contextlib.contextmanager
    def stream(self, stream):
        yield

    def CUDAGraph(self) -> FakeGraph:  # torch.cuda's name
        return FakeGraph(self)

    @contextlib.contextmanager
    def graph(self, graph, capture_error_mode="global"):
        assert capture_error_mode == "thread_local"
        self.captures += 1
        self._capturing = graph
        yield
        self._capturing = None


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.step = None
        self.output = None

    def replay(self) -> None:
        self.cuda.replays += 1
        self.output.copy_(self.step())  # the recorded kernels, on the same buffers


def test_the_graph_is_captured_once_per_shape_and_replayed_at_every_step(gpt2_engine):
    cuda = FakeCuda()
    twin = static_twin(gpt2_engine, cuda)
    real = st.static_step

    def recording(decoder, cache):  # the stand-in graph keeps the step its capture ran
        out = real(decoder, cache)
        if cuda._capturing is not None:
            cuda._capturing.step = lambda: real(decoder, cache)
            cuda._capturing.output = out
        else:
            cuda.calls_outside += 1
        return out

    greedy = GenerationConfig(max_new_tokens=30, temperature=0, stop_at_eos=False, heal=False)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(st, "static_step", recording)
        (ours,) = twin.generate(PROMPT, greedy)
        (again,) = twin.generate(PROMPT, greedy)
    (eager,) = gpt2_engine.generate(PROMPT, greedy)
    assert ours.text == again.text == eager.text
    assert cuda.captures == 1 and cuda.calls_outside == st.WARMUP_CALLS
    assert cuda.replays == 2 * 29  # the 29 steps after each prompt's logits, all replayed


def test_a_failed_capture_leaves_the_steps_uncaptured(gpt2_engine, caplog):
    class Refusing(FakeCuda):
        @contextlib.contextmanager
        def graph(self, graph, capture_error_mode="global"):
            raise RuntimeError("operation not permitted when stream is capturing")
            yield

    twin = static_twin(gpt2_engine, Refusing())
    greedy = GenerationConfig(max_new_tokens=30, temperature=0, stop_at_eos=False, heal=False)
    with caplog.at_level("WARNING"):
        (ours,) = twin.generate(PROMPT, greedy)
        (again,) = twin.generate(PROMPT, greedy)
    (eager,) = gpt2_engine.generate(PROMPT, greedy)
    assert ours.text == again.text == eager.text  # the position restored after the warm-up
    failures = [r for r in caplog.records if "capture failed" in r.getMessage()]
    assert len(failures) == 1 and "not permitted" in failures[0].getMessage()


def test_cuda_graphs_are_refused_where_they_do_not_apply(tiny_checkpoint, gpt2_engine):
    with pytest.raises(ConfigError, match="cuda_graphs needs a CUDA device; the model is on cpu"):
        Engine.load(tiny_checkpoint, device="cpu", cuda_graphs=True)
    from codeparrot.generation.gpt2 import int8_supported

    if int8_supported():
        with pytest.raises(ConfigError, match="not int8 copies"):
            Engine(gpt2_engine.model, gpt2_engine.tokenizer, quantize="int8", cuda_graphs=True)
    with pytest.raises(ConfigError, match="need the lean decoder"):
        Engine(gpt2_engine.model, gpt2_engine.tokenizer, lean_gpt2=False, cuda_graphs=True)
