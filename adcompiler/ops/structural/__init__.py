"""The rules of the structural ops, one module per op (`adcompiler.ops.control` declares
the ops and points each rule slot here). A rule gets the context of the pass that asks it
(the verifier's checker, the FLOP counter, the memory walk, the AD driver), since a region's
rule recurses through that pass. These modules are imported on a rule's first use."""
