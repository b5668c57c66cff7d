"""Stage 4, weight bytes: the parameter rule over an `ArchShape` (`rule`), one GPU's share of it or of the
checkpoint's own bytes by TP and PP (`split`), and which of the two a plan uses and why (`provenance`)."""
