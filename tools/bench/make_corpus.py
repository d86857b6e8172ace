#!/usr/bin/env python3
"""Builds tools/bench/corpus/world-english-bible/: the default haystack of sift-bench and the
default calibration text of sift-spts-calibrate, from the World English Bible (public domain) as
Debian ships it.

The source is Debian's package sword-text-web (SWORD module engWEB2015eb), read with diatheke
(Debian's package diatheke): `apt-get install diatheke sword-text-web` first. Each book is one
file, named in reading order because sift-bench reads a haystack folder's *.txt files in sorted
name order; each chapter is one paragraph. Verse numbers, Strong's tags and section headings are
left out (footnotes are off by default); where the module's markup joins two words without a
space (e.g. "God</w><w ...>created"), a space is put back. Nothing is reworded.

Run once; the output is committed with this script (tools/bench/corpus/README.md):

    python3 tools/bench/make_corpus.py [--out tools/bench/corpus/world-english-bible]
"""
import argparse
import html
import pathlib
import re
import subprocess
import sys

MODULE = "engWEB2015eb"
# The narrative books, in canonical order: about 1 MB of text (250K SmolLM2 tokens).
BOOKS = ["Genesis", "Exodus", "Joshua", "Judges", "Ruth", "I Samuel", "II Samuel", "I Kings",
         "II Kings"]
VERSE = re.compile(r"^(?P<book>.+?) (?P<chapter>\d+):(?P<verse>\d+): (?P<text>.*)$")


def verses(book: str):
    """(chapter, text) of every verse of `book`, tags removed."""
    out = subprocess.run(["diatheke", "-b", MODULE, "-k", book], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = VERSE.match(line)
        if not m:
            continue  # the trailing "(engWEB2015eb)" and empty lines
        text = m.group("text").replace("</w><w", "</w> <w")
        text = html.unescape(re.sub(r"<[^>]*>", "", text))
        text = re.sub(r"\s+", " ", text).strip()
        if text:
            yield int(m.group("chapter")), text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tools/bench/corpus/world-english-bible",
                        help="output folder")
    args = parser.parse_args()
    try:
        subprocess.run(["diatheke", "-b", "system", "-k", "modulelistnames"], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        print("make_corpus: diatheke is missing: apt-get install diatheke sword-text-web",
              file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.txt"):
        old.unlink()
    total = 0
    for i, book in enumerate(BOOKS, 1):
        chapters = {}
        for chapter, text in verses(book):
            chapters.setdefault(chapter, []).append(text)
        if not chapters:
            print(f"make_corpus: {book}: no verses (is sword-text-web installed?)", file=sys.stderr)
            return 1
        body = "\n\n".join(" ".join(v) for _, v in sorted(chapters.items())) + "\n"
        name = f"{i:02d}-{book.lower().replace(' ', '-')}.txt"
        (out / name).write_text(body, encoding="utf-8")
        total += len(body.encode())
        print(f"make_corpus: {name}: {len(chapters)} chapters, {len(body.encode())} bytes")
    print(f"make_corpus: {len(BOOKS)} files, {total} bytes in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
