"""The fenced code blocks of README.md and docs/*.md, with the comment above each that says
how the docs tests run it (docs/cli.md, "The docs run as written")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "DOCUMENTS", "Block", "blocks"]

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->$")
_NOT_RUN = re.compile(r"^not run: (\S.*)$")
_UNTIL_STOPPED = re.compile(r"^runs until stopped; running when: (\S.*)$")
_IN_SPARK = re.compile(r"^runs in the Spark session as spark\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its code and the comment above it."""

    path: Path
    line: int  # of the opening fence, counted from 1
    language: str
    code: str
    comment: str | None

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def not_run(self) -> str | None:
        """Why the block is not run, or None."""
        found = _NOT_RUN.match(self.comment or "")
        return found.group(1) if found else None

    @property
    def running_when(self) -> str | None:
        """For a block that runs until stopped: the shell command that succeeds once it runs."""
        found = _UNTIL_STOPPED.match(self.comment or "")
        return found.group(1) if found else None

    @property
    def in_spark(self) -> bool:
        return bool(_IN_SPARK.match(self.comment or ""))

    @property
    def understood(self) -> bool:
        """Whether the comment above, if any, is one of the forms the docs tests know."""
        return self.comment is None or bool(
            self.not_run or self.running_when or self.in_spark)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` in document order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, above, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            comment = _COMMENT.match(above or "")
            found.append(Block(path, i + 1, line[3:].strip(), "\n".join(lines[i + 1:end]) + "\n",
                               comment.group(1) if comment else None))
            i, above = end + 1, None
            continue
        if line.strip():
            above = line.strip()
        i += 1
    return found
