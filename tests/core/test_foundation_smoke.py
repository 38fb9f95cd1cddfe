from transformers import AutoModelForCausalLM, AutoTokenizer


def test_tiny_checkpoint_loads_with_auto_classes(tiny_checkpoint):
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    text = "def f(x):\n\treturn x  # é\r\n"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert model.config.vocab_size == len(tok)
