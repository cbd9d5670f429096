#!/usr/bin/env python3
"""Writes tokenizer goldens for the C++ tokenizer tests from HF `tokenizers` (the reference implementation).

Builds a deterministic (seeded) corpus -- source code in several languages, many scripts, emoji with ZWJ
sequences and skin tones, whitespace runs, digit runs, contractions, special tokens embedded in text,
normalization cases and random Unicode scalar values -- encodes every text with
tokenizers.Tokenizer.from_file(REPO_ROOT/tests/fixtures/minimax-m3/tokenizer.json) and records:

  entries[]:        {kind, text, ids, decoded, decoded_skip_special[, ids_split_special]}
  decode_entries[]: {ids, decoded, decoded_skip_special} for random id sequences (broken UTF-8, specials,
                    ids outside the vocabulary), which exercise the lossy decoder.

`ids_split_special` (encode with special-token parsing off) is written when the installed `tokenizers` has the
`encode_special_tokens` switch. The output stays under ~1.5 MB.

Usage: python3 tools/goldens/make_text_goldens.py REPO_ROOT OUT_JSON
   e.g. python3 tools/goldens/make_text_goldens.py . tests/fixtures/tokenizer/corpus_goldens.json
Needs only the standard library and `tokenizers` (no network).
"""
import json
import os
import random
import sys

import tokenizers

SEED = 20250601
MAX_OUTPUT_BYTES = 1_500_000

SPECIAL_TOKENS = [
    "]!p~[", "]~b]", "[e~[", "]!d~[", "]~!b[", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "]<]minimax[>[", "<mm:think>", "</mm:think>", "]<]image[>[", "]<]start of image[>[", "<fim_prefix>",
    "<filename>", "<|content_altered_placeholder|>",
]

CODE_SNIPPETS = [
    # Python
    "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n"
    "        a, b = b, a + b\n    return a\n\nprint([fib(i) for i in range(10)])  # 0 1 1 2 3 5 8\n",
    "class Cache(dict):\n    def __missing__(self, key):\n        self[key] = value = len(key) ** 2\n        return value\n"
    "\n\tif __name__ == '__main__':\n\t\tc = Cache(); print(c['abc'], f\"{c!r:>10}\")\n",
    # C++
    "#include <vector>\n#include <algorithm>\n\ntemplate <typename T>\nT sum(const std::vector<T>& v) {\n"
    "  return std::accumulate(v.begin(), v.end(), T{});\n}\n\nint main() {\n  std::vector<int> v{1, 2, 3};\n"
    "  std::sort(v.begin(), v.end(), [](int a, int b) { return a > b; });\n  return v[0] != 3;\n}\n",
    "struct Node { Node* next = nullptr; int val = 0; };\n// O(n) reversal\nNode* rev(Node* h) {\n"
    "  Node* p = nullptr;\n  while (h) { auto* n = h->next; h->next = p; p = h; h = n; }\n  return p;\n}\n",
    # Rust
    "fn main() {\n    let words: Vec<&str> = \"the quick brown fox\".split_whitespace().collect();\n"
    "    let total: usize = words.iter().map(|w| w.len()).sum();\n    println!(\"{} words, {total} bytes\", words.len());\n"
    "    if let Some(x) = words.first() { assert_eq!(*x, \"the\"); }\n}\n",
    "impl<'a, T: Clone + 'a> Iterator for Wrap<'a, T> {\n    type Item = T;\n"
    "    fn next(&mut self) -> Option<Self::Item> { self.inner.next().cloned() }\n}\n",
    # Go
    "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() {\n\tm := map[string]int{\"a\": 1, \"b\": 2}\n"
    "\tfor k, v := range m {\n\t\tfmt.Printf(\"%s=%d\\n\", strings.ToUpper(k), v)\n\t}\n}\n",
    # JavaScript / TypeScript
    "const add = (a, b) => a + b;\nexport async function load(url) {\n  const res = await fetch(url, { method: 'GET' });\n"
    "  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return res.json();\n}\n// TODO: retry?\n",
    "interface User { id: number; name?: string }\nconst users: User[] = [{ id: 1 }, { id: 2, name: \"Ann\" }];\n"
    "users.filter(u => u.name ?? false).forEach(console.log);\n",
    # Java
    "public final class Main {\n    public static void main(String[] args) throws Exception {\n"
    "        var list = java.util.List.of(3, 1, 2);\n        System.out.println(list.stream().sorted().toList());\n"
    "    }\n}\n",
    # SQL
    "SELECT u.id, COUNT(o.id) AS orders\nFROM users u\nLEFT JOIN orders o ON o.user_id = u.id\n"
    "WHERE u.created_at >= '2024-01-01'\nGROUP BY u.id\nHAVING COUNT(o.id) > 5\nORDER BY orders DESC;\n",
    # HTML / CSS
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Test &amp; demo</title></head>\n"
    "<body>\n  <div class=\"a b\" id='x'>Hello&nbsp;world</div>\n  <script>let x = 1 < 2 && 3 > 2;</script>\n</body>\n</html>\n",
    ".btn:hover > span::after {\n  content: \"\\201C\";\n  margin: 0 auto !important;\n  color: #ff00aa;\n}\n",
    # Shell
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n  [[ -s \"$f\" ]] && wc -l \"$f\" | awk '{print $1}'\n"
    "done 2>/dev/null || echo \"none\" >&2\n",
    # JSON / YAML
    "{\n  \"name\": \"m3serve\",\n  \"version\": \"0.1.0\",\n  \"tags\": [\"llm\", \"c++\"],\n  \"nested\": {\"ok\": true, "
    "\"n\": null, \"pi\": 3.14159, \"esc\": \"line\\nbreak \\u00e9\"}\n}\n",
    "server:\n  port: 8080\n  hosts:\n    - a.example.com\n    - b.example.com\n  tls: {enabled: false}\n# comment\n",
    # LaTeX
    "\\begin{align}\n  E &= mc^2 \\\\\n  \\nabla \\cdot \\mathbf{E} &= \\frac{\\rho}{\\varepsilon_0}\n\\end{align}\n",
    # Haskell / Lisp / assembly
    "main :: IO ()\nmain = mapM_ print $ takeWhile (< 100) $ map (^2) [1..]\n",
    "(defun fact (n) (if (<= n 1) 1 (* n (fact (- n 1)))))\n(print (fact 20))\n",
    "_start:\n    mov rax, 60      ; exit\n    xor rdi, rdi\n    syscall\n",
    # Diff / Markdown
    "--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,4 @@\n int x;\n-int y;\n+int y = 0;\n+int z;\n",
    "# Title\n\n* item **bold** _it_\n* `code` and [link](https://example.com/a_b?c=d#e)\n\n> quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
]

SCRIPT_SAMPLES = [
    "中文文本处理是一个复杂的问题，包括分词、词性标注和命名实体识别。",
    "我爱北京天安门。今天天气很好，我们去公园散步吧！",
    "日本語の文章には、ひらがな、カタカナ、漢字が混在しています。東京タワーは３３３メートルです。",
    "ｶﾀｶﾅ（半角）と全角ＡＢＣ１２３が混在する。",
    "한국어는 한글로 씁니다. 서울특별시의 인구는 약 천만 명입니다.",
    "العربية لغة سامية، يتحدث بها أكثر من ٤٠٠ مليون شخص. مَرْحَبًا بِكُمْ!",
    "فارسی: این یک متن آزمایشی است. ۱۲۳۴۵",
    "עברית נכתבת מימין לשמאל. שָׁלוֹם עֲלֵיכֶם!",
    "हिन्दी देवनागरी लिपि में लिखी जाती है। क्षत्रिय, ज्ञान, श्री।",
    "বাংলা ভাষা বাংলাদেশের রাষ্ট্রভাষা।",
    "தமிழ் ஒரு பழமையான மொழி. ஸ்ரீ",
    "తెలుగు భాష. ಕನ್ನಡ ಭಾಷೆ. മലയാളം ഭാഷ.",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ",
    "ພາສາລາວ. ភាសាខ្មែរ. မြန်မာဘာသာ.",
    "Русский язык — один из восточнославянских языков. Ёжик в тумане.",
    "Українська мова: ґанок, їжак, є, і. Беларуская: ў.",
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. ΑΒΓΔ ς σ Σ",
    "Tiếng Việt có nhiều dấu: Hà Nội, Thành phố Hồ Chí Minh, người, được, những.",
    "Türkçe: İstanbul, ığdır, ŞEKER, çiçek. Azərbaycan: ə.",
    "Deutsch: Straße, Größe, Äpfel, ÜBER. Français: œuvre, garçon, naïve, Noël.",
    "Polski: zażółć gęślą jaźń. Čeština: příliš žluťoučký kůň. Română: ș ț.",
    "ქართული ენა. Հայերեն լեզու.",
    "አማርኛ ቋንቋ። ትግርኛ።",
    "བོད་ཡིག། සිංහල භාෂාව.",
    "ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ᠎ᠡ (Mongolian with U+180E)",
    "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ. ᐃᓄᒃᑎᑐᑦ. ᚠᚢᚦᚨᚱᚲ. Ⲙⲉⲧⲣⲉⲙⲛ̀ⲭⲏⲙⲓ.",
    "𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭 𝟙𝟚𝟛 — mathematical alphanumerics",
    "𠜎𠜱𠝹𠱓 𪚥 (CJK extension B) 〇一二三",
    "Ⅻ ⅷ ½ ¾ ² ³ ₁₂ ① ⑳ ٣ ৩ ๓ ༣ 𝟘",
]

EMOJI = [
    "😀", "😂", "🥲", "🤖", "🚀", "🔥", "💯", "❤️", "❤", "✨", "👍", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿",
    "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏽‍🚀", "👨🏿‍🦰", "🏳️‍🌈", "🏴‍☠️", "🇫🇷", "🇯🇵", "🇺🇸", "🇩🇪", "#️⃣", "1️⃣",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁️‍🗨️", "🫶🏾", "🧔‍♀️", "☺️", "⌚", "©️", "™", "🀄", "🃏",
]

WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "WORLD", "MixedCase", "camelCase",
    "snake_case", "kebab-case", "x", "I", "a", "e-mail", "naïve", "café", "API", "HTTP/2", "v1.2.3", "C++",
    "don't", "it's", "we'll", "they're", "you've", "I'm", "he'd", "O'Neil", "rock'n'roll",
]

CONTRACTION_TEMPLATES = [
    "{w}'s", "{w}'t", "{w}'re", "{w}'ve", "{w}'m", "{w}'ll", "{w}'d", "{w}'S", "{w}'LL", "{w}'Re", "{w}’s",
    "{w}'ſ", "{w}''s", "'s{w}", "{w}'", "'{w}'", "{w}'x",
]

WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n", "\n ", " \t ",
              "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u180e", "\u200b", "\u2009", "\u202f",
              "\x0b", "\x0c", "\u1680", "\u205f"]

NORMALIZATION = [
    "e\u0301", "E\u0301\u0302", "a\u0323\u0302", "a\u0302\u0323", "o\u0308\u0304", "\u1100\u1161\u11a8",
    "\u212b", "\u2126", "\u00c5", "A\u030a", "\ufb01", "\u0344", "\u0958", "\u1e9b\u0323", "q\u0307\u0323",
    "\u0041\u0300\u0316", "\u30ab\u3099", "\u0627\u0653", "\u05d1\u05bc", "\u0928\u093c",
]


# Characters whose treatment depends on the Unicode version of a table: combining marks added in Unicode
# 10-14 (HF's NFC uses Unicode 9.0 data), letters/digits added in 15.0-16.0 (Oniguruma's regex properties)
# and 17.0 additions (unknown to HF 0.23). Mixed with older marks and letters so that reordering,
# composition and the regex letter/number classes all come into play.
NEWER_UNICODE_RANGES = [
    (0x1DF6, 0x1DFA), (0x1ABF, 0x1ACE), (0x0898, 0x089F), (0x08CA, 0x08D3), (0x10F46, 0x10F50),
    (0x1E130, 0x1E136), (0x11930, 0x11943), (0x31350, 0x323AF), (0x2EBF0, 0x2EE5D), (0x11F00, 0x11F5A),
    (0x1E4D0, 0x1E4F9), (0x13460, 0x143FA), (0x11380, 0x113E2), (0x1CCF0, 0x1CCF9), (0x16D40, 0x16D79),
    (0x105C0, 0x105F3), (0x1C89, 0x1C8A), (0xA7CB, 0xA7CD), (0x323B0, 0x33479), (0x10940, 0x10959),
    (0x11DB0, 0x11DDB), (0x1E6C0, 0x1E6DE), (0x1ACF, 0x1ADD),
]
OLDER_MARKS = ["\u0301", "\u0323", "\u0369", "\u0308", "\u05bc", "\u093c", "\u3099", "\u0334"]


def gen_unicode_versions(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        a, b = rng.choice(NEWER_UNICODE_RANGES)
        x = chr(rng.randint(a, b))
        parts.append(rng.choice([
            "a" + x + "a", "A" + x + "a", " " + x + "1", "1" + x + "1", x + x, "!" + x + "!", x + " \n",
            "e" + rng.choice(OLDER_MARKS) + x, "e" + x + rng.choice(OLDER_MARKS), x + "'s", x,
        ]))
    return rng.choice(["", " ", "\n"]).join(parts)


def rand_scalar(rng):
    """A random Unicode scalar value (no surrogates), weighted towards the ranges tokenizers meet."""
    r = rng.random()
    if r < 0.15:
        cp = rng.randrange(0x00, 0x80)
    elif r < 0.25:
        cp = rng.randrange(0x80, 0x800)
    elif r < 0.35:
        cp = rng.randrange(0x0300, 0x0370)  # combining marks
    elif r < 0.70:
        cp = rng.randrange(0x800, 0x10000)
    elif r < 0.85:
        cp = rng.randrange(0x10000, 0x20000)
    else:
        cp = rng.randrange(0x20000, 0x110000)
    if 0xD800 <= cp <= 0xDFFF:
        cp = 0xFFFD
    return chr(cp)


def rand_whitespace_run(rng):
    return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6)))


def gen_code(rng):
    snippet = rng.choice(CODE_SNIPPETS)
    lines = snippet.split("\n")
    r = rng.random()
    if r < 0.4:
        return snippet
    if r < 0.7:  # a random slice of lines
        a = rng.randrange(len(lines))
        b = rng.randint(a + 1, len(lines))
        return "\n".join(lines[a:b])
    if r < 0.85:  # re-indented
        ind = rng.choice(["  ", "    ", "\t", " \t", "        "])
        return "\n".join(ind + line if line else line for line in lines)
    return snippet.replace("\n", "\r\n")


def gen_script(rng):
    s = rng.choice(SCRIPT_SAMPLES)
    r = rng.random()
    if r < 0.5:
        return s
    if r < 0.8:
        return s + rng.choice([" ", "\n", "", " 123 ", " Hello "]) + rng.choice(SCRIPT_SAMPLES)
    a = rng.randrange(len(s))
    return s[a:a + rng.randint(1, 20)]


def gen_emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.6:
            parts.append(rng.choice(EMOJI))
        elif r < 0.8:
            parts.append(rng.choice(WORDS))
        else:
            parts.append(rng.choice([" ", "", "\n", "!", "..."]))
    return rng.choice(["", " "]).join(parts)


def gen_whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append(rand_whitespace_run(rng) if rng.random() < 0.55 else rng.choice(WORDS + ["1", "!", "中", "😀"]))
    return "".join(parts)


def gen_digits(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.5:
            parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30))))
        elif r < 0.6:
            parts.append("".join(rng.choice("٠١٢٣٤٥٦٧٨٩") for _ in range(rng.randint(1, 8))))
        elif r < 0.7:
            parts.append("".join(rng.choice("０１２３４５６７８９") for _ in range(rng.randint(1, 8))))
        elif r < 0.8:
            parts.append(rng.choice(["3.14159", "1,000,000", "1e-9", "-42", "0x1F", "2024-06-01", "12:30:45",
                                     "+1 (555) 010-9999", "v2.10.3", "½", "²³", "Ⅻ", "①②③"]))
        else:
            parts.append(rng.choice(["abc", "x", "USD", "km", "%", "$", "€"]))
    return rng.choice(["", " ", ",", "\n"]).join(parts)


def gen_contractions(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.6:
            parts.append(rng.choice(CONTRACTION_TEMPLATES).format(w=rng.choice(WORDS + ["IT", "WE", "Ça", "日本"])))
        else:
            parts.append(rng.choice(WORDS))
    return " ".join(parts)


def gen_special(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(SPECIAL_TOKENS))
        elif r < 0.5:
            tok = rng.choice(SPECIAL_TOKENS)
            parts.append(tok[: rng.randint(1, max(1, len(tok) - 1))])  # partial marker
        elif r < 0.7:
            parts.append(rng.choice(WORDS))
        elif r < 0.85:
            parts.append(rand_whitespace_run(rng))
        else:
            parts.append(rng.choice(["user", "ai", "system", "\n", "<", "[", "]", "~", "{\"a\": 1}"]))
    return "".join(parts)


def gen_chat(rng):
    msgs = []
    for _ in range(rng.randint(1, 4)):
        role = rng.choice(["system", "user", "ai", "tool"])
        body = rng.choice([gen_script, gen_code, gen_contractions, gen_emoji])(rng)
        msgs.append("]~b]" + role + "\n" + body + "[e~[\n")
    return "]~!b[" + "".join(msgs) + "]~b]ai\n" + rng.choice(["", "<mm:think>\n", "<mm:think>x</mm:think>"])


def gen_random_cp(rng):
    return "".join(rand_scalar(rng) for _ in range(rng.randint(1, 40)))


def gen_normalization(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice(NORMALIZATION) if rng.random() < 0.6 else rng.choice(WORDS + [" ", "\n"]))
    return "".join(parts)


def gen_mixed(rng):
    gens = [gen_code, gen_script, gen_emoji, gen_whitespace, gen_digits, gen_contractions, gen_special,
            gen_random_cp, gen_normalization]
    return "".join(rng.choice(gens)(rng) for _ in range(rng.randint(2, 5)))


def gen_repeat(rng):
    unit = rng.choice(["a", "ab", " ", "\n", "!", "1", "中", "😀", "A", "é", "\t", "=", "-", "_", "aA"])
    return unit * rng.randint(2, 600)


FIXED_TEXTS = [
    "", " ", "\n", "\r\n", "a", "\u0000", "\u0000a\u0000", "\x7f", "\ufeffBOM", "\ufffd", "\uffff", "\U0010ffff",
    "Hello world", "Hello's 1234!!!\n世界", "<mm:think>Let me reason.</mm:think>The answer is 4.",
    "]~b]user\nhi[e~[", "[e~[[e~[]~b]", "]~b user [e~ <mm:think", "x<tool_call>y</tool_call>z",
    "   leading", "trailing   ", "a  \n  b", " \n \n ", "\t\n\t", "!!!\n\n", "?\r\n", "...//\n/",
]

GENERATORS = [
    ("code", gen_code, 260), ("script", gen_script, 260), ("emoji", gen_emoji, 180),
    ("whitespace", gen_whitespace, 220), ("digits", gen_digits, 160), ("contractions", gen_contractions, 160),
    ("special", gen_special, 200), ("chat", gen_chat, 60), ("random_cp", gen_random_cp, 400),
    ("normalization", gen_normalization, 120), ("unicode_versions", gen_unicode_versions, 150),
    ("mixed", gen_mixed, 160), ("repeat", gen_repeat, 40),
]


def random_ids(rng, vocab_size):
    ids = []
    for _ in range(rng.randint(1, 20)):
        r = rng.random()
        if r < 0.35:
            ids.append(rng.randrange(0x80, 0x100))  # single high bytes: broken UTF-8
        elif r < 0.55:
            ids.append(rng.randrange(0, 0x80))
        elif r < 0.75:
            ids.append(rng.randrange(256, 200000))
        elif r < 0.95:
            ids.append(rng.randrange(200000, 200061))
        else:
            ids.append(rng.randrange(200061, vocab_size + 8))  # not in the vocabulary
    return ids


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    repo_root, out_path = sys.argv[1], sys.argv[2]
    tok = tokenizers.Tokenizer.from_file(os.path.join(repo_root, "tests/fixtures/minimax-m3/tokenizer.json"))
    can_split_special = hasattr(tok, "encode_special_tokens")
    rng = random.Random(SEED)

    texts = [("fixed", t) for t in FIXED_TEXTS]
    for kind, gen, count in GENERATORS:
        texts += [(kind, gen(rng)) for _ in range(count)]
    seen = set()
    unique = []
    for kind, text in texts:
        if text not in seen:
            seen.add(text)
            unique.append((kind, text))

    entries = []
    for kind, text in unique:
        ids = tok.encode(text, add_special_tokens=False).ids
        entry = {
            "kind": kind,
            "text": text,
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        }
        if can_split_special:
            tok.encode_special_tokens = True
            entry["ids_split_special"] = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = False
        entries.append(entry)

    decode_entries = []
    vocab_size = 200061
    for _ in range(300):
        ids = random_ids(rng, vocab_size)
        decode_entries.append({
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })

    def dump(entries_subset):
        doc = {
            "generator": "tools/goldens/make_text_goldens.py",
            "seed": SEED,
            "tokenizers_version": getattr(tokenizers, "__version__", "unknown"),
            "entries": entries_subset,
            "decode_entries": decode_entries,
        }
        # One entry per line keeps diffs reviewable; ensure_ascii=False keeps the file small.
        body = ",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in entries_subset)
        head = json.dumps({k: v for k, v in doc.items() if k not in ("entries", "decode_entries")},
                          ensure_ascii=False)[:-1]
        dec = ",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in decode_entries)
        return head + ',\n"entries":[\n' + body + '\n],\n"decode_entries":[\n' + dec + "\n]}\n"

    # Drop the longest entries (never the fixed ones) until the file fits the size budget.
    out = dump(entries)
    while len(out.encode("utf-8")) > MAX_OUTPUT_BYTES:
        longest = max((i for i, e in enumerate(entries) if e["kind"] != "fixed"), key=lambda i: len(entries[i]["text"]))
        del entries[longest]
        out = dump(entries)
    json.loads(out)  # self-check
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(out)
    print(f"wrote {out_path}: {len(entries)} texts, {len(decode_entries)} id sequences, "
          f"{len(out.encode('utf-8'))} bytes, tokenizers {getattr(tokenizers, '__version__', '?')}, "
          f"split_special={'yes' if can_split_special else 'no'}")


if __name__ == "__main__":
    main()
