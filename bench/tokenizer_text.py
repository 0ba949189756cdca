#!/usr/bin/env python3
"""Writes the documents bench/tokenizer.sh encodes: JSON Lines of strings,
at least MIN_BYTES of UTF-8 in all, seeded so every run encodes the same
text. Kinds, mixed: the repository's own code and prose (C, shell, CMake,
Markdown), prose in several scripts, numbers, whitespace runs, emoji and
long unbroken strings.
usage: tokenizer_text.py ROOT OUT [MIN_BYTES]"""
import json
import pathlib
import random
import sys

SENTENCES = [
    # German, French, Spanish, Portuguese, Italian, Polish, Turkish, Vietnamese
    "Die Prüfung der Übertragungsrate ergab, dass größere Blöcke schneller ankommen.",
    "Le cache de préfixes réutilise les blocs déjà calculés ; c'est là qu'il gagne.",
    "¿Cuántas solicitudes caben en la memoria antes de que empiece el desalojo?",
    "A fila de espera cresce quando a taxa de chegada passa da capacidade do serviço.",
    "L'aggiornamento dei pesi arriva mentre il server continua a rispondere.",
    "Żółć gęślą jaźń — zdanie, które zawiera wszystkie polskie znaki diakrytyczne.",
    "Önbellek isabeti düştüğünde ilk jetonun gecikmesi hızla artıyor.",
    "Bộ nhớ đệm tiền tố giúp giảm thời gian chờ của yêu cầu đầu tiên.",
    # Russian, Ukrainian, Greek
    "Планировщик выбирает запросы с самым длинным общим префиксом в кэше.",
    "Швидкість запису на диск залежить від глибини черги та розміру блоку.",
    "Η μνήμη της κάρτας γραφικών γεμίζει όταν οι συνομιλίες γίνονται μεγάλες.",
    # Chinese, Japanese, Korean
    "前缀缓存命中率下降时，首个令牌的延迟会明显增加。",
    "模型更新通过共享内存传输，推理服务在此期间继续运行。",
    "プレフィックスキャッシュが効くと、最初のトークンまでの時間が短くなります。",
    "東京の天気は晴れ、気温は二十三度です。カタカナとひらがなと漢字が混ざります。",
    "요청이 많아지면 대기열이 길어지고 응답 시간이 늘어납니다.",
    # Arabic, Hebrew, Hindi, Bengali, Thai, Georgian, Armenian
    "عندما تمتلئ الذاكرة يبدأ النظام في إخراج الكتل الأقل استخداماً.",
    "המטמון שומר את הבלוקים שחושבו כבר כדי לחסוך זמן חישוב.",
    "कैश में पहले से गणना किए गए ब्लॉक फिर से उपयोग किए जाते हैं।",
    "অনুরোধের সংখ্যা বাড়লে সারির দৈর্ঘ্যও বাড়ে।",
    "หน่วยความจำแคชช่วยลดเวลาในการตอบสนองของคำขอแรก",
    "ქეშის მოხვედრის მაჩვენებელი მნიშვნელოვნად გაიზარდა.",
    "Քեշի արդյունավետությունը կախված է հարցումների կրկնությունից։",
    # English with contractions and capitals
    "We'll see whether it's the scheduler's fault; they've said I'd know by Monday.",
    "THE QUICK BROWN FOX JUMPED OVER THE LAZY DOG'S BACK, DIDN'T IT? Yes, it DID.",
    "camelCaseIdentifiers, snake_case_names and SCREAMING_CASE sit side by side.",
]

EMOJI = [
    "😀", "🚀", "🔥", "✅", "❌", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🇯🇵", "🇩🇪", "🏳️‍🌈", "❤️", "🤖",
    "🧠", "⚡", "🎉", "📈", "🙂", "☕", "🌍",
]


def numbers(rng):
    parts = []
    for _ in range(rng.randint(5, 40)):
        kind = rng.randrange(6)
        if kind == 0:
            parts.append(str(rng.randrange(10 ** rng.randint(1, 12))))
        elif kind == 1:
            parts.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 6)}f}")
        elif kind == 2:
            parts.append(f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
                         f" {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}")
        elif kind == 3:
            parts.append(f"0x{rng.getrandbits(rng.choice([8, 32, 64])):x}")
        elif kind == 4:
            parts.append(f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(1000000, 9999999)}")
        else:
            parts.append(f"{rng.randint(0, 100)}% of {rng.randint(1, 10**6):,}")
    return rng.choice([" ", ", ", "\n", "\t"]).join(parts)


def whitespace(rng):
    out = []
    for _ in range(rng.randint(5, 30)):
        out.append(rng.choice(["word", "x", "if (a) {", "}", "# note", "ok", "done."]))
        out.append("".join(rng.choice([" ", "  ", "\t", "\n", "\r\n", "    ", "\n\n"])
                           for _ in range(rng.randint(1, 12))))
    return "".join(out)


def prose(rng):
    out = []
    for _ in range(rng.randint(3, 15)):
        out.append(rng.choice(SENTENCES))
        if rng.random() < 0.3:
            out.append(" " + "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))))
        out.append(rng.choice([" ", " ", "\n", "\n\n"]))
    return "".join(out)


def emoji(rng):
    return "".join(rng.choice(EMOJI) + rng.choice(["", " ", "", "\n", "ok"])
                   for _ in range(rng.randint(10, 80)))


def blob(rng):
    """Long pieces (base64, hex, one letter repeated): the merges of words
    past 64 bytes."""
    kind = rng.randrange(3)
    length = rng.randint(65, 3000)
    if kind == 0:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    elif kind == 1:
        alphabet = "abcdef"
    else:
        alphabet = rng.choice("aZ")
    return "".join(rng.choice(alphabet) for _ in range(length))


def repository_text(root):
    """The repository's code and prose, in a fixed order."""
    files = []
    for pattern in ("*/*.c", "*/*.h", "include/kvio/*.h", "bench/*.sh", "scripts/*.sh",
                    "CMakeLists.txt", "*.md", "docs/*.md", "*/*.md"):
        files.extend(sorted(root.glob(pattern)))
    seen = set()
    for path in files:
        if path in seen or "build" in path.parts[0]:
            continue
        seen.add(path)
        yield path.read_text(encoding="utf-8", errors="replace")


def main():
    root = pathlib.Path(sys.argv[1])
    out = pathlib.Path(sys.argv[2])
    min_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 20
    rng = random.Random(20261204)
    generators = [numbers, whitespace, prose, prose, emoji, blob]
    repository = repository_text(root)
    docs, total = [], 0
    while total < min_bytes:
        if rng.random() < 0.45:
            text = next(repository, None)
            if text is None:
                text = prose(rng)
            else:
                start = rng.randrange(max(1, len(text) - 4000))
                text = text[start:start + rng.randint(200, 4000)]
        else:
            text = rng.choice(generators)(rng)
        docs.append(text)
        total += len(text.encode("utf-8"))
    with out.open("w", encoding="utf-8") as handle:
        for text in docs:
            handle.write(json.dumps(text, ensure_ascii=False) + "\n")
    print(f"documents {len(docs)} bytes {total}")


if __name__ == "__main__":
    main()
