"""A table's mirror: when it takes what the batches hand over (``keeper``: in the background once their
checkpoint is saved, or inline), what an update does (``rule``: pure, which rows are appended, which
merged), and how (``update``: in Spark, staged rows folded, APPENDed, MERGEd; ``file_appends``: a fresh
mirror's staged rows as its own data files; ``file_rewrite``: a MERGE of changes alone by rewriting the
files they touch, by ``file_merge``'s rule on one file's rows); ``job``: the same MERGE as a Spark job of
its own (``sink.mirror = "job"``)."""
