"""The benchmark corpus gives texts of exactly the asked token count on every family's tokenizer."""

import pytest

from embedtext.server.models.families import FAMILIES


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from embedtext.server.models.families import write_family_model

    root = tmp_path_factory.mktemp("families")
    return {family: write_family_model(root / family, family, layers=1) for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tokens", [8, 50])
def test_texts_have_exactly_the_asked_tokens(model_dirs, family, tokens):
    from tokenizers import Tokenizer

    from embedtext.bench.corpus import BenchCorpus

    corpus = BenchCorpus(model_dirs[family])
    texts = corpus.texts(300, tokens)
    assert len(set(texts)) == 300
    tokenizer = Tokenizer.from_file(str(model_dirs[family] / "tokenizer.json"))
    assert {len(e.ids) for e in tokenizer.encode_batch(texts)} == {tokens}
