"""The naming rules said in words, for error messages (never a regular expression). Pure."""

from __future__ import annotations

TO = "\u2013"  # an en dash, as in "1 to 64"

DATASET_ID_RULE = (
    f"ids are 1{TO}128 letters, digits, '.', '_' or '-', starting with a letter or digit"
)
LABEL_RULE = f"version labels are 1{TO}64 letters, digits, '.', '_' or '-'"
TAG_RULE = f"version tags are 1{TO}64 letters, digits, '.', '_' or '-'"
DIGEST_RULE = "a digest is 'sha256:' and 64 lowercase hex digits"
REF_RULE = (
    f"a ref is a version label or tag (1{TO}64 letters, digits, '.', '_' or '-'), 'latest', or "
    "'sha256:' and 64 lowercase hex digits"
)
FILENAME_RULE = (
    f"file names are 1{TO}128 letters, digits, '.', '_' or '-', starting with a letter or digit"
)
CURSOR_RULE = "a cursor is the `next_cursor` of the page before, as it was answered"
