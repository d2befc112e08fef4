import pytest


@pytest.fixture(scope="session")
def reference_tokenizer():
    """The plain Hugging Face tokenizer of a tokenizer.json: the reference the server's ids must equal."""
    from tokenizers import Tokenizer

    def load(path, max_tokens=None):
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        if max_tokens:
            tokenizer.enable_truncation(max_length=max_tokens)
        return tokenizer

    return load
