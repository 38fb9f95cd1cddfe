"""Settings several stages share, each declared once: help, default, bounds, choices.

A stage config makes its field with ``TEMPERATURE.field()`` (or ``.field(default, help)``
where the stage's default genuinely differs, saying why in the help); the bounds and
choices stay the ones declared here, so ``--help``, the errors and a UI's sliders
(:func:`codeparrot.config.field_bounds`) agree in every stage. A test walks every stage
config and fails when one of these fields drifts from its declaration.

Standard library only: the CLI imports it to build ``--help``.
"""

from __future__ import annotations

import dataclasses

from codeparrot.config import Declaration

# -- choices -------------------------------------------------------------------------------

# Model shapes of codeparrot.models.presets.PRESETS (a test keeps the two equal).
PRESET_NAMES = (
    "tiny", "small", "large", "tiny-qwen", "tiny-qwen-untied", "mini-qwen", "small-qwen",
)  # fmt: skip
# Experiment trackers of a training run (Accelerate's log_with; "none": metrics file only).
TRACKERS = ("tensorboard", "wandb", "trackio", "none")
# Autocast dtype of training (Accelerate's mixed_precision, or "auto": codeparrot.precision).
MIXED_PRECISIONS = ("auto", "no", "bf16", "fp16")
# Weights' dtype at inference ("auto": bf16 on a GPU, float32 on a CPU).
DTYPES = ("auto", "float32", "bfloat16", "float16")
# Weight formats of the one-token decoding steps: the model's own, or int8 weight-only
# copies (models of the lean decoder on a CPU; see codeparrot.generation.lean).
QUANTIZE = ("none", "int8")
# What loading accepts: those, or "auto" (int8 where it applies, the model's own elsewhere).
LOAD_QUANTIZE = (*QUANTIZE, "auto")

# The longest context a preset may be given (positions of the model).
MAX_N_POSITIONS = 1 << 16
# -- sampling ------------------------------------------------------------------------------

MAX_NEW_TOKENS = Declaration(64, "most tokens to generate per candidate", ge=1, le=4096)
TEMPERATURE = Declaration(0.2, "sampling temperature; 0 means greedy decoding", ge=0)
TOP_P = Declaration(
    0.95, "nucleus sampling: keep the smallest set of tokens with this mass", gt=0, le=1
)
TOP_K = Declaration(0, "keep only the k most likely tokens (0: no limit)", ge=0)
MIN_P = Declaration(
    0.0,
    "drop tokens less likely than this share of the most likely one's probability (0: off)",
    ge=0,
    le=1,
)
CANDIDATES = Declaration(
    1, "number of candidates sampled for the prompt, in one batch", ge=1, le=1024
)
SYNTAX_SAMPLES = Declaration(
    0,
    "syntax check: when a candidate leaves the code around it unparseable, sample this many "
    "more and keep the most common one after which the code parses (0: off; nothing is run)",
    ge=0,
    le=64,
)

# -- loading a model for inference ---------------------------------------------------------

# The one form of a checkpoint argument: `--checkpoint CHECKPOINT` where a command takes one,
# a positional `CHECKPOINT ...` where it takes several (a test walks every command). Required
# unless a stage gives a default (`CHECKPOINT.field(None)`); the help stays this one.
CHECKPOINT = Declaration(
    dataclasses.MISSING,
    "a checkpoint directory (a LoRA adapter's too) or a Hugging Face Hub id "
    "(ORG/NAME, ORG/NAME@REVISION)",
    metavar="CHECKPOINT",
)

DEVICE = Declaration(None, "torch device (default: cuda when available, else cpu)")
DTYPE = Declaration("auto", "weights' dtype (auto: bf16 on GPU, fp32 on CPU)", choices=DTYPES)
QUANTIZE_WEIGHTS = Declaration(
    "none",
    "weights of the one-token decoding steps: none (the checkpoint's own), int8 "
    "(int8 copies of the matrices, for GPT-2, StarCoder, Llama-family and Qwen checkpoints "
    "on a CPU; prompts read them too where a probe at load finds that faster) or auto "
    "(int8 where it applies)",
    choices=LOAD_QUANTIZE,
)

CUDA_GRAPHS = Declaration(
    False,
    "on a CUDA device: capture the one-token decoding step once as a CUDA graph (a key/value "
    "cache of fixed capacity, the position kept on the device) and replay it for every "
    "token, n samples of a prompt in one batch; for GPT-2, Llama-family and Qwen "
    "checkpoints in their own weights",
)

# The revision of a Hub model (every command that takes a checkpoint resolves it through
# codeparrot.models.checkpoint.resolve_checkpoint).
REVISION = Declaration(
    None,
    "revision of a Hub model given as ORG/NAME: a branch, tag or commit (or write "
    "ORG/NAME@REVISION); default: main. Ignored for a local directory",
)

# -- model shape ---------------------------------------------------------------------------

PRESET = Declaration("tiny", "model shape", choices=PRESET_NAMES)
N_POSITIONS = Declaration(None, "context length (default: the preset's)", ge=8, le=MAX_N_POSITIONS)
# The smallest vocabulary is a rule of the tokenizer's (codeparrot.tokenizer.config:
# vocab_size_problem), explained with the special tokens it must hold.
VOCAB_SIZE = Declaration(
    32768,
    "vocabulary size, the 256 byte symbols, <|endoftext|> and the 4 fill-in-the-middle "
    "sentinels included",
    le=1_000_000,
)

# -- optimisation --------------------------------------------------------------------------

LEARNING_RATE = Declaration(None, "peak learning rate", gt=0)
WARMUP_STEPS = Declaration(100, "linear warmup steps before the schedule (cosine or WSD)", ge=0)
MIN_LR_RATIO = Declaration(0.1, "final learning rate as a fraction of the peak", ge=0, le=1)
WEIGHT_DECAY = Declaration(0.1, "AdamW weight decay (weights only, not biases or norms)", ge=0)
MAX_STEPS = Declaration(1000, "optimizer steps; the learning-rate schedule ends here", ge=1)
MAX_MINUTES = Declaration(None, "stop training after this many minutes", gt=0)
BATCH_SIZE = Declaration(8, "sequences per process per micro-batch", ge=1)
SEQ_LENGTH = Declaration(None, "tokens per packed sequence (default: the model's context)", ge=2)
DROPOUT = Declaration(
    None,
    "set residual, embedding and attention dropout (default: the preset's or checkpoint's)",
    ge=0,
    lt=1,
)
MIXED_PRECISION = Declaration(
    "auto",
    "autocast dtype: auto (bf16 on a CUDA device that supports it; on a CPU bf16 only where "
    "a short measurement at start finds it faster than fp32, else fp32), no (fp32), bf16, or "
    "fp16 (CUDA only); CODEPARROT_CPU_BF16=0|1 forces the CPU measurement's answer",
    choices=MIXED_PRECISIONS,
)
TRACKER = Declaration("tensorboard", "experiment tracker", choices=TRACKERS)
OPTIMIZERS = ("adamw", "muon")
SCHEDULES = ("cosine", "wsd")
OPTIMIZER = Declaration(
    "adamw",
    "adamw: AdamW on every parameter (the CodeParrot recipe); muon: Muon on the hidden "
    "weight matrices and AdamW on embeddings, head, biases and norm gains",
    choices=OPTIMIZERS,
)
SCHEDULE = Declaration(
    "cosine",
    "learning-rate schedule after the warmup: cosine to the floor, or wsd (stable at the "
    "peak, then linear to the floor over the last --decay-fraction of the steps)",
    choices=SCHEDULES,
)

# -- data selection --------------------------------------------------------------------------

MIN_DOCSTRING_SHARE = Declaration(
    0.0,
    "data selection: drop files where fewer than this share of the functions have a "
    "docstring (files without functions too); 0 keeps them all, as CodeParrot did",
    ge=0,
    le=1,
)

FUNCTION_DOCUMENTS = Declaration(
    0,
    "data selection: add this many copies of each training file's short documented "
    "top-level functions as documents of their own (imports, signature, docstring, body: "
    "HumanEval's shape); 0 adds none, as CodeParrot did",
    ge=0,
    le=10,
)

# -- fill in the middle ----------------------------------------------------------------------

# The measured default (RESULTS.md, bench/recipe.py): the share of documents that new runs
# train as fill-in-the-middle examples when their tokenizer has the sentinels. On tiny-qwen at
# the quickstart's budget 0.9 infills best (single-line HumanEval infilling 1.25x rate 0.5's)
# for +1% left-to-right held-out loss (Bavarian et al. 2022 found 0.5-0.9 free at scale).
DEFAULT_FIM_RATE = 0.9
FIM_MODES = ("document", "context")  # where the FIM transform applies: before or after packing
FIM_RATE = Declaration(
    None,
    "share of training documents turned into fill-in-the-middle examples, whole before "
    "packing (--fim-mode document) or as the pieces of each packed sequence (context); "
    f"0: left to right only; default: {DEFAULT_FIM_RATE} when the tokenizer has the FIM "
    "sentinels, else 0 (recorded with the run)",
    ge=0,
    le=1,
)
FIM_SPM_RATE = Declaration(
    0.5, "share of the fill-in-the-middle examples laid out suffix-first (SPM), not PSM", ge=0, le=1
)
FIM_LINE_RATE = Declaration(
    0.0,
    "share of the fill-in-the-middle examples whose middle ends at a line end: whole lines, "
    "or the rest of a line and the lines after it (the unit an editor and HumanEval "
    "infilling ask for), instead of a span between two random characters",
    ge=0,
    le=1,
)
FIM_MODE = Declaration(
    "context",
    "apply fill-in-the-middle to each document before packing, or to each document piece "
    "of a packed sequence after it (Bavarian et al. 2022 found context-level better)",
    choices=FIM_MODES,
)

# auto by default: each model family's template documents its order (PSM for StarCoder,
# Qwen2.5-Coder, CodeLlama and DeepSeek-Coder); our own checkpoints train on both and complete
# best in SPM (RESULTS.md, "Fill in the middle": on held-out lines the quickstart model
# completes as well with the suffix in SPM order as with the prefix alone, far worse in PSM).
FIM_ORDER = Declaration(
    "auto",
    "fill in the middle (a prompt with a suffix): spm puts the suffix first so that the "
    "prefix runs straight into the middle, psm the prefix first; auto: the model family's "
    "own order (spm for checkpoints trained here, psm for the others)",
    choices=("auto", "psm", "spm"),  # codeparrot.fim.ORDER_CHOICES
)
FIM_TOKENS = Declaration(
    "",
    "fill in the middle with a model whose template is not known: its PREFIX,SUFFIX,MIDDLE "
    "tokens, and optionally an END token that ends the middle, comma-separated token names "
    "of its tokenizer (empty: detected from the tokenizer, as for StarCoder, SantaCoder, "
    "Qwen2.5-Coder, CodeGemma, CodeLlama and DeepSeek-Coder)",
    metavar="PRE,SUF,MID[,END]",
)

# -- editor prompts (the language server's, and eval lines, which asks as it does) -----------

CONTEXT_TOKENS = Declaration(
    768,
    "token budget of the prompt (the text before the cursor, nearest lines kept); at most "
    "what the model's context leaves after the new tokens",
    ge=16,
    le=32768,
)
FIM_SUFFIX_SHARE = Declaration(
    0.25,
    "with FIM: the most of the prompt budget the suffix window may take (whole lines after "
    "the cursor; the prefix gets the rest)",
    ge=0.0,
    le=0.9,
)
WORKSPACE_SHARE = Declaration(
    0.0,
    "the most of the prompt budget that snippets of other files may take (`# Path:` comment "
    "blocks of the lines most like the code before the cursor); 0 leaves them out",
    ge=0.0,
    le=0.5,
)

# -- data ----------------------------------------------------------------------------------

WORKERS = Declaration(0, "worker processes for building the corpus (0: all cores)", ge=0)
VALID_FRACTION = Declaration(0.05, "share of files held out for the validation split", ge=0, lt=1)
