"""For module developers' own tests: the pytest plugin (entry point `armload`) and the library
behind it (`ModuleHandle`, `ModuleOops`)."""
