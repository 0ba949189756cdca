#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json holding a tiktoken rank file's
vocabulary as byte-level BPE, as gpt-oss's and Llama 3's tokenizer.json
were made from theirs: each token's merge is the split the token's own
byte-pair merging ends on (ranks below it only), the pre-tokenizer is a
Split by the encoding's pattern, then ByteLevel. bench/tokenizer.sh gives
it to kvio and to Hugging Face's tokenizers.js.
usage: tiktoken_to_json.py RANKS.tiktoken o200k_base|cl100k_base OUT.json"""
import base64
import json
import sys

# tiktoken's patterns (tiktoken_ext/openai_public.py), without possessive
# quantifiers, which Oniguruma and tokenizers.js read as plain ones (the
# matches are the same for these patterns).
CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
PATTERNS = {
    "o200k_base": "|".join([
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        + CONTRACTIONS + "?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        + CONTRACTIONS + "?",
        r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"]),
    "cl100k_base": CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def byte_alphabet():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
                 + list(range(0xAE, 0x100)))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


def split_of(ranks, token, rank):
    """The two parts byte-pair merging of token stops at, ranks < rank."""
    parts = [bytes([b]) for b in token]
    while True:
        best, at = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        return None
    return parts


def main():
    ranks_path, encoding, out = sys.argv[1:4]
    pattern = PATTERNS[encoding]
    ranks = {}
    with open(ranks_path) as handle:
        for line in handle:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    chars = byte_alphabet()
    spell = lambda token: "".join(chars[b] for b in token)
    vocab = {spell(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            parts = split_of(ranks, token, rank)
            if parts is not None:
                merges.append([spell(parts[0]), spell(parts[1])])
    document = {
        "version": "1.0",
        "added_tokens": [{"id": len(ranks) + 1, "content": "<|endoftext|>", "special": True,
                          "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(document, handle, ensure_ascii=False)
    print(f"tokens {len(vocab)} merges {len(merges)}")


if __name__ == "__main__":
    main()
