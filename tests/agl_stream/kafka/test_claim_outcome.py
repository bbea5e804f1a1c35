"""The rules that settle a claim left in doubt (its commit's answer lost), from the group's committed offset."""

from __future__ import annotations

from typing import Optional

import pytest
from aiokafka.structs import OffsetAndMetadata

from agl_stream.kafka._consumer import claim_outcome

OFFSET, GENERATION = 10, 5


@pytest.mark.parametrize(
    ("committed", "expected", "why"),
    [
        (None, False, "nothing committed: the record goes to its partition's owner"),
        (OffsetAndMetadata(10, "agl1:5:3"), False, "committed up to the record, not past it"),
        (OffsetAndMetadata(11, "agl1:5:3"), True, "committed past it in the claim's own generation"),
        (OffsetAndMetadata(40, "agl1:6:11"), True, "the next owner began past the record"),
        (OffsetAndMetadata(40, "agl1:6:10"), False, "the next owner began at the record: it was delivered there"),
        (OffsetAndMetadata(40, "agl1:6:"), None, "the next owner does not know where it began"),
        (OffsetAndMetadata(40, "agl1:7:30"), None, "two generations later: the one in between is unknown"),
        (OffsetAndMetadata(40, ""), None, "committed by something that does not write our metadata"),
        (OffsetAndMetadata(40, "agl1:x:3"), None, "metadata that does not parse"),
    ],
)
def test_a_claim_in_doubt_is_settled_only_where_the_committed_offset_proves_it(
    committed: Optional[OffsetAndMetadata], expected: Optional[bool], why: str
) -> None:
    assert claim_outcome(OFFSET, GENERATION, committed) is expected, why
