"""torch's warnings that the framework knows to be harmless are said once, in its words, on rank 0;
every other warning is kept."""

from __future__ import annotations

import logging
import warnings

from framework.rank.known_warnings import quiet_known_warnings

FSDP_VIEW = (
    "FSDP2-wrapped module (FSDPGPT) returned a view tensor. An in-place op on this view (e.g., `x += y`) "
    "will silently drop the pre-backward hook and skip the all-gather, which can cause backward to fail "
    "or produce wrong gradients."
)
REDISTRIBUTE = (
    "While redistributing from (_NormPartial(2.0), _NormPartial(2.0)) to (Replicate(), Replicate()), "
    "2 sequential all_reduce operations will be performed. This is suboptimal"
)


def test_a_known_warning_is_said_once_in_our_words_and_the_others_are_kept(caplog):
    caplog.set_level(logging.INFO)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_known_warnings(rank=0)
        for _ in range(3):
            warnings.warn(FSDP_VIEW, UserWarning, stacklevel=1)
            logging.getLogger("torch.distributed.tensor._redistribute").warning(REDISTRIBUTE)
        warnings.warn("a warning of the user's own", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["a warning of the user's own"]
    ours = [r.getMessage() for r in caplog.records if r.name == "framework.rank.known_warnings"]
    assert len(ours) == 2 and ours[0].startswith("fsdp: the model's output is a view")
    assert not any("sequential all_reduce" in r.getMessage() for r in caplog.records)


def test_the_other_ranks_say_nothing(caplog):
    caplog.set_level(logging.INFO)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_known_warnings(rank=1)
        warnings.warn(FSDP_VIEW, UserWarning, stacklevel=1)
    assert seen == [] and not [r for r in caplog.records if r.name == "framework.rank.known_warnings"]
