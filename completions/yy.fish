complete --keep-order --exclusive --command yy --arguments "(COMPLETE=fish yy -- (commandline --current-process --tokenize --cut-at-cursor) (commandline --current-token))"
