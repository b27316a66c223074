"""BABILong QA1-QA5 with the official scoring (``longshort_babilong``): its YAMLs, the scorer and loader
(:mod:`.task`), and an offline generator of BABILong-style data (:mod:`.generator`, :mod:`.stories`,
:mod:`.haystack`)."""
