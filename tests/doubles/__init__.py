"""The suite's shared test doubles, one of each, imported from their modules:

- :mod:`tests.doubles.clock`: :class:`Clock`, a clock tests move by hand;
- :mod:`tests.doubles.embedder`: :class:`HashEmbedder` (hashed bag of words instead of a model) and
  its three configurations, ``hash_embed``, ``split_embed`` and ``word_embed``; :class:`WordVectorizer`;
- :mod:`tests.doubles.ingester`: :class:`ChunkIngest`, the archival ingester (sentences or paragraphs);
- :mod:`tests.doubles.dispatcher`: :class:`InlineDispatcher`, the cold path inline (spool, ingest);
- :mod:`tests.doubles.llm`: :class:`FakeLLM`, an OpenAI-compatible server that plays a script;
- :mod:`tests.doubles.harness`: :class:`Harness`, a MemoryService and ToolExecutor on a real store;
- :mod:`tests.doubles.coldpath`: a ready ``Deps`` for cold-path tasks, small settings, conversation lines.
"""
