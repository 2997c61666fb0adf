# SPDX-License-Identifier: Apache-2.0
"""Makes the kit's tiny model in a folder: a random Llama (4 layers, hidden
256, 8 heads / 4 KV heads), seeded, with a 1,024-token byte-level BPE
tokenizer trained by `tokenizers` on text generated here. Nothing is
downloaded. Usage: python make_model.py DIR"""

import random
import sys

SEED = 0
VOCAB = 1024

WORDS = (
    "the a an of to in is was for on that with as by at from this be are it not or which have "
    "ray beam actor worker node cluster object value call method task group placement daemon "
    "socket token model layer tensor head batch prompt tokens text output engine parallel pipeline "
    "river mountain city morning evening light water stone garden window music story people time "
    "one two three four five six seven eight nine ten hundred first last new old small large"
).split()


def corpus(n_lines=4000):
    rng = random.Random(SEED)
    for _ in range(n_lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        line = " ".join(words)
        yield line[0].upper() + line[1:] + rng.choice(".!?,;")


def make_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)
    return fast


def make_model(out, vocab_size):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)


def main(out):
    fast = make_tokenizer(out)
    make_model(out, len(fast))


if __name__ == "__main__":
    main(sys.argv[1])
