"""The values of a call record's `tag` column that stages act on, and the upstream header behind one of them.

A tagged call is stored and published, but never trained on (`records.sequences.untrainable`)."""

TRANSLATION_TAG = "translation"  # the factory's own EN→KO translation calls (X-Dflash-Tag)
REHEARSAL_TAG = "rehearsal"  # answered by the scripted brain of a rehearsal (it sends the header below)
REHEARSAL_HEADER = "x-dflash-rehearsal"
