"""pytest: ptf/ holds PTF tests, run by tng_p4.run_ptf against BMv2, never collected by pytest."""

collect_ignore = ["ptf"]
