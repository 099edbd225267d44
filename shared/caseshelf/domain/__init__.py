"""The pure core: models, canonical form, digests, versions, refs. No I/O."""
