"""The plotting kit: axis rules and styles that read right at the edges (:mod:`.axes`; :mod:`.label_room` measures tick
labels), shared by the eval report's, the study's and the synthetic experiments' figures. A kit on floor 1: it
imports only matplotlib (inside the functions that draw) and the ground's length labels."""
