# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_yy_global_optspecs
    string join \n h/help V/version
end

function __fish_yy_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_yy_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_yy_using_subcommand
    set -l cmd (__fish_yy_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c yy -n "__fish_yy_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_needs_command" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_needs_command" -f -a "serve" -d 'Run the control plane: the admin API and the machine API for Runners'
complete -c yy -n "__fish_yy_needs_command" -f -a "admin" -d 'Administer a data directory locally (e.g. create the first admin)'
complete -c yy -n "__fish_yy_needs_command" -f -a "login" -d 'Log in to a yy server and store an API token for later commands'
complete -c yy -n "__fish_yy_needs_command" -f -a "backup" -d 'Back up the control plane\'s data directory, and verify backups'
complete -c yy -n "__fish_yy_needs_command" -f -a "restore" -d 'Restore the control plane\'s data directory from a backup (`yy serve` must be stopped)'
complete -c yy -n "__fish_yy_needs_command" -f -a "bench" -d 'Benchmarks on this machine: command dispatch, computers, the egress proxy, backup, computer agents\' turns and artifacts'
complete -c yy -n "__fish_yy_needs_command" -f -a "image" -d 'Build, verify and list the computer image (on the local Docker engine)'
complete -c yy -n "__fish_yy_needs_command" -f -a "guest" -d 'The guest agent inside a computer (run by the Runner, not by hand)'
complete -c yy -n "__fish_yy_needs_command" -f -a "egress" -d 'The egress proxy of public-web computers (run by the Runner, not by hand)'
complete -c yy -n "__fish_yy_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c yy -n "__fish_yy_needs_command" -f -a "man" -d 'Write man pages'
complete -c yy -n "__fish_yy_needs_command" -f -a "logout" -d 'Revoke the stored API token on the server and forget it'
complete -c yy -n "__fish_yy_needs_command" -f -a "whoami" -d 'Show the account behind the current login'
complete -c yy -n "__fish_yy_needs_command" -f -a "account" -d 'Manage accounts (admins only)'
complete -c yy -n "__fish_yy_needs_command" -f -a "token" -d 'API tokens: list, revoke'
complete -c yy -n "__fish_yy_needs_command" -f -a "source" -d 'Manage sources: the Hermes connections Bots come from'
complete -c yy -n "__fish_yy_needs_command" -f -a "profile" -d 'Manage profiles: a Hermes profile and its guest working directory'
complete -c yy -n "__fish_yy_needs_command" -f -a "agent" -d 'Manage agents: persistent identities with a profile and an execution environment'
complete -c yy -n "__fish_yy_needs_command" -f -a "runner" -d 'Register and manage Runners, the execution hosts next to Hermes'
complete -c yy -n "__fish_yy_needs_command" -f -a "chat" -d 'Send a message to an agent and stream its reply'
complete -c yy -n "__fish_yy_needs_command" -f -a "computer" -d 'Isolated computers of computer agents: create, list, show, stop, rm, exec, audit'
complete -c yy -n "__fish_yy_needs_command" -f -a "session" -d 'Bot sessions: list, show the transcript, stop, close'
complete -c yy -n "__fish_yy_needs_command" -f -a "artifact" -d 'Files exported from computers and fetched from Runners: list, show, get'
complete -c yy -n "__fish_yy_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand serve" -l listen -d 'Address to listen on; port 0 picks a free port (the first stdout line tells which)' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l data-dir -d 'Data directory holding the database [default: $XDG_DATA_HOME/yy]' -r -F
complete -c yy -n "__fish_yy_using_subcommand serve" -l max-pending-commands -d 'Most commands that may wait in one Runner\'s queue' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l max-pending-bytes -d 'Most bytes of payload that may wait in one Runner\'s queue' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l allowed-host -d 'A host name the server answers to besides its listen address (repeatable); requests naming another host, and admin requests from another origin, are refused' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l header-timeout -d 'Longest wait for a request\'s headers; also closes a keep-alive connection idle this long' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l body-timeout -d 'Longest time a request body may take to arrive' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l max-connections -d 'Most connections open at once [default: from the open-file limit, raised to its hard limit at start]' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l shutdown-grace -d 'Longest wait for requests in flight on SIGTERM before they are cut' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l token-lifetime -d 'An API token unused for this long stops working; each use extends it' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -l retention -d 'How long finished commands and the events of finished turns are kept' -r
complete -c yy -n "__fish_yy_using_subcommand serve" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand serve" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand admin; and not __fish_seen_subcommand_from create help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand admin; and not __fish_seen_subcommand_from create help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand admin; and not __fish_seen_subcommand_from create help" -f -a "create" -d 'Create an admin account directly in a data directory (how the first admin is made)'
complete -c yy -n "__fish_yy_using_subcommand admin; and not __fish_seen_subcommand_from create help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from create" -l data-dir -d 'Data directory of `yy serve` [default: $XDG_DATA_HOME/yy]' -r -F
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from create" -l username -d 'Name of the new admin' -r
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from create" -l password-stdin -d 'Read the password from stdin instead of a terminal prompt'
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from create" -l json -d 'Print the new account as JSON'
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create an admin account directly in a data directory (how the first admin is made)'
complete -c yy -n "__fish_yy_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand login" -l username -d 'Account name' -r
complete -c yy -n "__fish_yy_using_subcommand login" -l password-stdin -d 'Read the password from stdin instead of a terminal prompt'
complete -c yy -n "__fish_yy_using_subcommand login" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand login" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand backup; and not __fish_seen_subcommand_from create verify help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand backup; and not __fish_seen_subcommand_from create verify help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand backup; and not __fish_seen_subcommand_from create verify help" -f -a "create" -d 'Back up the control plane\'s data directory into one archive (works while `yy serve` runs: the database is copied with SQLite\'s online backup)'
complete -c yy -n "__fish_yy_using_subcommand backup; and not __fish_seen_subcommand_from create verify help" -f -a "verify" -d 'Check every entry of an archive against its manifest and the database\'s integrity; `--json` lists what it holds'
complete -c yy -n "__fish_yy_using_subcommand backup; and not __fish_seen_subcommand_from create verify help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from create" -l data-dir -d 'Data directory of `yy serve` [default: $XDG_DATA_HOME/yy]' -r -F
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from create" -s o -l output -d 'The archive to write (written to a temporary file, synced, then renamed)' -r -F
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from create" -l force -d 'Replace FILE if it exists'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from create" -l json -d 'Print the summary as JSON'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from verify" -l json -d 'Print the archive\'s manifest and the checks as JSON'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from verify" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from verify" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from help" -f -a "create" -d 'Back up the control plane\'s data directory into one archive (works while `yy serve` runs: the database is copied with SQLite\'s online backup)'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from help" -f -a "verify" -d 'Check every entry of an archive against its manifest and the database\'s integrity; `--json` lists what it holds'
complete -c yy -n "__fish_yy_using_subcommand backup; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand restore" -l data-dir -d 'Data directory to restore into; it need not exist [default: $XDG_DATA_HOME/yy]' -r -F
complete -c yy -n "__fish_yy_using_subcommand restore" -l json -d 'Print the summary as JSON'
complete -c yy -n "__fish_yy_using_subcommand restore" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand restore" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -f -a "dispatch" -d 'Measure command dispatch on this machine: pickup latency, throughput, Runner memory when idle and control plane memory under idle long-polls'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -f -a "computer" -d 'Measure computers side by side with the docker CLI: cold start (create to guest agent ready) against `docker run --rm IMAGE true`, and a tool round trip (`exec true` through the guest agent) against `docker exec CONTAINER true`'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -f -a "artifacts" -d 'Measure verified artifacts side by side with plain copies: a 25 MiB `computer_export` against `docker cp` + `sha256sum`, and `yy runner fetch` of an 8 MB file against `cp` + `sha256sum` (whole processes)'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -f -a "backup" -d 'Measure `yy backup create` plus `yy backup verify` of a generated data directory (a database and many artifact files) against `tar -cf` plus `sha256sum` of every file of the same tree, alternating rounds in the same run'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -f -a "turn" -d 'Measure a computer agent\'s turn (the isolated Worker, its tool in the agent\'s computer) against a host agent\'s turn with the same scripted model: one tool call, then the answer'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -f -a "egress" -d 'Measure the egress proxy on loopback: added connect latency (CONNECT and its answer against a direct connect) and bulk throughput through the tunnel against direct'
complete -c yy -n "__fish_yy_using_subcommand bench; and not __fish_seen_subcommand_from dispatch computer artifacts backup turn egress help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -l commands -d 'Pings in the throughput run (0 skips it)' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -l latency-samples -d 'Pings timed one at a time for the pickup latency (0 skips it)' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -l long-polls -d 'Idle long-polls held against the control plane, one registered Runner each (0 skips it)' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -l enqueuers -d 'Concurrent enqueuers in the throughput run' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -l bin -d 'The yy executable to run as control plane and Runner [default: this one]' -r -F
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -l json -d 'Print the figures and targets as one JSON object'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from dispatch" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from computer" -l samples -d 'Samples of each figure' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from computer" -l json -d 'Print the figures and targets as one JSON object'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from computer" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from computer" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from artifacts" -l samples -d 'Samples of each figure' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from artifacts" -l json -d 'Print the figures and targets as one JSON object'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from artifacts" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from artifacts" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from backup" -l size-mib -d 'Size of the generated data directory in MiB' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from backup" -l files -d 'Artifact files the data is spread over' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from backup" -l rounds -d 'Rounds of each side; the medians are reported' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from backup" -l dir -d 'Where to make the scratch directory (it needs about three times --size-mib free) [default: the system\'s temporary directory]' -r -F
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from backup" -l json -d 'Print the figures and the target as one JSON object'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from backup" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from backup" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from turn" -l hermes -d 'The `hermes` executable of the Hermes venv (the Worker runs the `python` beside it)' -r -F
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from turn" -l samples -d 'Turns of each kind timed (after one untimed of each)' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from turn" -l json -d 'Print the figures and the target as one JSON object'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from turn" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from turn" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from egress" -l samples -d 'Connections timed each way for the latency' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from egress" -l rounds -d 'Bulk transfers each way' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from egress" -l mib -d 'MiB per bulk transfer' -r
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from egress" -l json -d 'Print the figures and targets as one JSON object'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from egress" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from egress" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "dispatch" -d 'Measure command dispatch on this machine: pickup latency, throughput, Runner memory when idle and control plane memory under idle long-polls'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "computer" -d 'Measure computers side by side with the docker CLI: cold start (create to guest agent ready) against `docker run --rm IMAGE true`, and a tool round trip (`exec true` through the guest agent) against `docker exec CONTAINER true`'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "artifacts" -d 'Measure verified artifacts side by side with plain copies: a 25 MiB `computer_export` against `docker cp` + `sha256sum`, and `yy runner fetch` of an 8 MB file against `cp` + `sha256sum` (whole processes)'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "backup" -d 'Measure `yy backup create` plus `yy backup verify` of a generated data directory (a database and many artifact files) against `tar -cf` plus `sha256sum` of every file of the same tree, alternating rounds in the same run'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "turn" -d 'Measure a computer agent\'s turn (the isolated Worker, its tool in the agent\'s computer) against a host agent\'s turn with the same scripted model: one tool call, then the answer'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "egress" -d 'Measure the egress proxy on loopback: added connect latency (CONNECT and its answer against a direct connect) and bulk throughput through the tunnel against direct'
complete -c yy -n "__fish_yy_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand image; and not __fish_seen_subcommand_from build verify list ls help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand image; and not __fish_seen_subcommand_from build verify list ls help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand image; and not __fish_seen_subcommand_from build verify list ls help" -f -a "build" -d 'Build the computer image from Debian packages (no registry needed); prints the full image ID as the last line'
complete -c yy -n "__fish_yy_using_subcommand image; and not __fish_seen_subcommand_from build verify list ls help" -f -a "verify" -d 'Start a throw-away hardened computer from IMAGE_ID and check it; exits 1 if any check fails'
complete -c yy -n "__fish_yy_using_subcommand image; and not __fish_seen_subcommand_from build verify list ls help" -f -a "list" -d 'List the yy computer images on this Docker engine'
complete -c yy -n "__fish_yy_using_subcommand image; and not __fish_seen_subcommand_from build verify list ls help" -f -a "ls" -d 'List the yy computer images on this Docker engine'
complete -c yy -n "__fish_yy_using_subcommand image; and not __fish_seen_subcommand_from build verify list ls help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l mirror -d 'Debian mirror for debootstrap' -r
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l security-mirror -d 'Mirror for SUITE-security updates' -r
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l suite -d 'Debian suite (default: this host\'s release codename, else bookworm)' -r
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l packages -d 'Package list, one per line (default: the list built into yy, images/base/packages.txt)' -r -F
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l binary -d 'The guest agent binary (default: this yy, which must be statically linked)' -r -F
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l tag -d 'Also tag the image (e.g. yy-computer:latest); computers still use the full ID' -r
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l cache-dir -d 'Cache of root filesystems, by recipe' -r -F
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l lock -d 'Write the package lock here (default: images/base/packages.lock when that directory exists under the current directory)' -r -F
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l no-updates -d 'Do not apply SUITE-updates and SUITE-security (point release only)'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -l fresh -d 'Rebuild the root filesystem even when a cached one matches the recipe'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from build" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from verify" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from verify" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from verify" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from help" -f -a "build" -d 'Build the computer image from Debian packages (no registry needed); prints the full image ID as the last line'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from help" -f -a "verify" -d 'Start a throw-away hardened computer from IMAGE_ID and check it; exits 1 if any check fails'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the yy computer images on this Docker engine'
complete -c yy -n "__fish_yy_using_subcommand image; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand guest; and not __fish_seen_subcommand_from serve help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand guest; and not __fish_seen_subcommand_from serve help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand guest; and not __fish_seen_subcommand_from serve help" -f -a "serve" -d 'Speak the guest protocol (JSON lines) on stdin/stdout until stdin closes'
complete -c yy -n "__fish_yy_using_subcommand guest; and not __fish_seen_subcommand_from serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand guest; and __fish_seen_subcommand_from serve" -l workspace -d 'The workspace root that file operations are confined to (default: the current directory)' -r -F
complete -c yy -n "__fish_yy_using_subcommand guest; and __fish_seen_subcommand_from serve" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand guest; and __fish_seen_subcommand_from serve" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand guest; and __fish_seen_subcommand_from help" -f -a "serve" -d 'Speak the guest protocol (JSON lines) on stdin/stdout until stdin closes'
complete -c yy -n "__fish_yy_using_subcommand guest; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand egress; and not __fish_seen_subcommand_from serve help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand egress; and not __fish_seen_subcommand_from serve help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand egress; and not __fish_seen_subcommand_from serve help" -f -a "serve" -d 'Run the egress proxy (the Runner starts it in a container; not usually run by hand)'
complete -c yy -n "__fish_yy_using_subcommand egress; and not __fish_seen_subcommand_from serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from serve" -l listen -d 'Address and port to listen on' -r
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from serve" -l deny-host -d 'An address of the host, refused whatever its class; repeat for several (the proxy\'s own addresses are found by itself)' -r
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from serve" -l max-connections -d 'Connections served at once; one more is answered 503' -r
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from serve" -l idle-timeout -d 'Close a connection after this long without a byte either way' -r
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from serve" -l connect-timeout -d 'Give up connecting to an address after this long' -r
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from serve" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from help" -f -a "serve" -d 'Run the egress proxy (the Runner starts it in a container; not usually run by hand)'
complete -c yy -n "__fish_yy_using_subcommand egress; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand completions" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand completions" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand man" -l out-dir -d 'Write a page per command into DIR instead of printing yy(1) to stdout' -r -F
complete -c yy -n "__fish_yy_using_subcommand man" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand man" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand logout" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand logout" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand logout" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand whoami" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand whoami" -l json -d 'Print JSON'
complete -c yy -n "__fish_yy_using_subcommand whoami" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand whoami" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "list" -d 'List accounts'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "ls" -d 'List accounts'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "show" -d 'Show one account'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "create" -d 'Create an account (password from a terminal prompt or --password-stdin)'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "disable" -d 'Disable an account: it can no longer log in, and its tokens are revoked at once'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "enable" -d 'Enable a disabled account (its old tokens stay revoked)'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "passwd" -d 'Set a password (yours by default; admins may set any account\'s). Every other token of the account is revoked'
complete -c yy -n "__fish_yy_using_subcommand account; and not __fish_seen_subcommand_from list ls show create disable enable passwd help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from create" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from create" -l admin -d 'Make the account an admin'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from create" -l password-stdin -d 'Read the password from stdin instead of a terminal prompt'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from create" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from disable" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from disable" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from disable" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from disable" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from enable" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from enable" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from enable" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from enable" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from passwd" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from passwd" -l password-stdin -d 'Read the new password from stdin instead of a terminal prompt (an account that is not an admin gives its current password on the first line, the new one on the second)'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from passwd" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from passwd" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from help" -f -a "list" -d 'List accounts'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one account'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create an account (password from a terminal prompt or --password-stdin)'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from help" -f -a "disable" -d 'Disable an account: it can no longer log in, and its tokens are revoked at once'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from help" -f -a "enable" -d 'Enable a disabled account (its old tokens stay revoked)'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from help" -f -a "passwd" -d 'Set a password (yours by default; admins may set any account\'s). Every other token of the account is revoked'
complete -c yy -n "__fish_yy_using_subcommand account; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand token; and not __fish_seen_subcommand_from list ls revoke help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand token; and not __fish_seen_subcommand_from list ls revoke help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand token; and not __fish_seen_subcommand_from list ls revoke help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand token; and not __fish_seen_subcommand_from list ls revoke help" -f -a "list" -d 'List live API tokens (yours; an admin\'s lists every account\'s)'
complete -c yy -n "__fish_yy_using_subcommand token; and not __fish_seen_subcommand_from list ls revoke help" -f -a "ls" -d 'List live API tokens (yours; an admin\'s lists every account\'s)'
complete -c yy -n "__fish_yy_using_subcommand token; and not __fish_seen_subcommand_from list ls revoke help" -f -a "revoke" -d 'Revoke a token by id: it stops working at once'
complete -c yy -n "__fish_yy_using_subcommand token; and not __fish_seen_subcommand_from list ls revoke help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from list" -l account -d 'Only the tokens of this account' -r
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from ls" -l account -d 'Only the tokens of this account' -r
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from revoke" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from revoke" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from revoke" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "list" -d 'List live API tokens (yours; an admin\'s lists every account\'s)'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'Revoke a token by id: it stops working at once'
complete -c yy -n "__fish_yy_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "list" -d 'List sources'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "ls" -d 'List sources'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "show" -d 'Show one source'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "create" -d 'Create a source'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "update" -d 'Change a source\'s description'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "archive" -d 'Archive a source that no active agent or enabled Runner uses'
complete -c yy -n "__fish_yy_using_subcommand source; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from list" -l archived -d 'Include archived entries'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from ls" -l archived -d 'Include archived entries'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from create" -l description -d 'A one-line description' -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from create" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from create" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from update" -l description -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from update" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from update" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from update" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from update" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from archive" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from archive" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from archive" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from archive" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "list" -d 'List sources'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one source'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create a source'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "update" -d 'Change a source\'s description'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "archive" -d 'Archive a source that no active agent or enabled Runner uses'
complete -c yy -n "__fish_yy_using_subcommand source; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "list" -d 'List profiles'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "ls" -d 'List profiles'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "show" -d 'Show one profile'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "create" -d 'Create a profile (NAME is the Hermes profile name)'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "update" -d 'Change a profile\'s guest terminal.cwd'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "archive" -d 'Archive a profile that no active agent uses'
complete -c yy -n "__fish_yy_using_subcommand profile; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from list" -l archived -d 'Include archived entries'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from ls" -l archived -d 'Include archived entries'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from create" -l cwd -d 'The guest terminal.cwd: an absolute path (needed by computer agents), or \'.\', \'auto\' or \'cwd\' for a profile used only by host agents' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from create" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from create" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from update" -l cwd -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from update" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from update" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from update" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from update" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from archive" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from archive" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from archive" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from archive" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "list" -d 'List profiles'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one profile'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create a profile (NAME is the Hermes profile name)'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "update" -d 'Change a profile\'s guest terminal.cwd'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "archive" -d 'Archive a profile that no active agent uses'
complete -c yy -n "__fish_yy_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "list" -d 'List agents'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "ls" -d 'List agents'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "show" -d 'Show one agent'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "create" -d 'Create an agent (at most 100 active agents per account)'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "update" -d 'Change an agent\'s profile, environment or team management (applies from its next turn)'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "archive" -d 'Archive an agent (frees its slot; its records stay)'
complete -c yy -n "__fish_yy_using_subcommand agent; and not __fish_seen_subcommand_from list ls show create update archive help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from list" -l archived -d 'Include archived entries'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from ls" -l archived -d 'Include archived entries'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -l profile -d 'Profile the agent runs with' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -l env -d 'Where the agent\'s tools run' -r -f -a "host\t'Tools run on the Hermes host'
computer\t'Tools run in the agent\'s isolated computer'"
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -l source -d 'Source the agent belongs to [default: the only source, when there is one]' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -l manage-team -d 'Let the agent form and manage teams'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from update" -l profile -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from update" -l env -r -f -a "host\t'Tools run on the Hermes host'
computer\t'Tools run in the agent\'s isolated computer'"
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from update" -l manage-team -d 'Allow (true) or forbid (false) team management' -r -f -a "true\t''
false\t''"
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from update" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from update" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from update" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from update" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from archive" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from archive" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from archive" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from archive" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "list" -d 'List agents'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one agent'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create an agent (at most 100 active agents per account)'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "update" -d 'Change an agent\'s profile, environment or team management (applies from its next turn)'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "archive" -d 'Archive an agent (frees its slot; its records stay)'
complete -c yy -n "__fish_yy_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "run" -d 'Run this machine\'s Runner: connect out to the control plane and execute its commands'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "backup" -d 'Back up a Runner\'s data directory: receipts, Hermes sessions, computer records and workspaces (takes the maintenance lock: the Runner must be stopped; its computers are stopped and that is confirmed)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "restore" -d 'Restore a Runner\'s data directory from `yy runner backup` (takes the maintenance lock; workspace roots stay in place and get the backup\'s contents)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "register" -d 'Register a Runner for a source and write its private runner.json (mode 0600)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "list" -d 'List Runners (tokens are never shown)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "ls" -d 'List Runners (tokens are never shown)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "show" -d 'Show one Runner by id or unique id prefix'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "ping" -d 'Send pings through the Runner\'s command queue and show each round trip'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "fetch" -d 'Export a file from the Runner\'s machine (it must lie inside the Runner\'s artifactRoots)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "sessions" -d 'List the live Hermes sessions of a Runner\'s own channel'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "commands" -d 'List a Runner\'s recent commands and their states'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "cancel" -d 'Cancel a command: a queued one never runs; a running one is stopped on the Runner'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "update" -d 'Change how a Runner\'s next computers start: the image and/or the network mode'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "egress-log" -d 'Show the egress proxy\'s recent decisions on a Runner (newest first)'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "disable" -d 'Disable a Runner: its token stops working at once and for good'
complete -c yy -n "__fish_yy_using_subcommand runner; and not __fish_seen_subcommand_from run backup restore register list ls show ping fetch sessions commands cancel update egress-log disable help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -l config -d 'runner.json written by `yy runner register` (must be mode 0600)' -r -F
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -l data-dir -d 'Directory for the Runner\'s receipts [default: $XDG_DATA_HOME/yy/runner-RUNNER_ID]' -r -F
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -l max-concurrent -d 'Commands that may run at once' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -l shutdown-grace -d 'After SIGTERM, how long commands in flight may finish before they are recorded as uncertain' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -l max-computers -d 'Computers that may run at once on this host (one more is refused, not queued)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -l egress-network -d 'The Docker network the egress proxy of public-web computers reaches out through (it must exist) [default: a bridge network the Runner creates, yy-egress-out-RUNNER_ID]' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -l egress-dns -d 'A DNS server for the egress proxy; repeat for several [default: the Docker engine\'s]' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from run" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from backup" -l data-dir -d 'The Runner\'s data directory (`yy runner run --data-dir`)' -r -F
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from backup" -s o -l output -d 'The archive to write (written to a temporary file, synced, then renamed)' -r -F
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from backup" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from backup" -l force -d 'Replace FILE if it exists'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from backup" -l json -d 'Print the summary as JSON'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from backup" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from backup" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from restore" -l data-dir -d 'The Runner\'s data directory; it need not exist' -r -F
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from restore" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from restore" -l json -d 'Print the summary as JSON'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from restore" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from restore" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l source -d 'Source whose Bots this Runner executes (one enabled Runner per source)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l profile -d 'A profile the Runner may execute; repeat for several' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l server-url -d 'The control plane\'s URL as the Runner\'s machine reaches it [default: the server this CLI talks to]' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l hermes-url -d 'The local Hermes on the Runner\'s machine' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l artifact-root -d 'A host directory files may be exported from; repeat for several (none: no exports)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -s o -l output -d 'Where to write runner.json (\'-\' for stdout)' -r -F
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l computer-image -d 'Enable computers, created from this full image id (the sha256:... `yy image build` printed)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l network -d 'How computers reach the network' -r -f -a "none\t'no network interface but loopback (the default)'
public-web\t'public addresses on ports 80/443 through the Runner\'s egress proxy only'"
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -l force -d 'Overwrite FILE if it exists'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from register" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ping" -s c -l count -d 'How many pings' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ping" -l hold -d 'Hold each ping on the Runner this long (e.g. 2s) to try a slow command' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ping" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ping" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ping" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from ping" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from fetch" -s o -l output -d 'Where to write the file (\'-\' for stdout)' -r -F
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from fetch" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from fetch" -l force -d 'Overwrite FILE if it exists'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from fetch" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from fetch" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from sessions" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from sessions" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from sessions" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from sessions" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from commands" -l limit -d 'How many, newest first' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from commands" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from commands" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from commands" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from commands" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from cancel" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from cancel" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from cancel" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from cancel" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from update" -l computer-image -d 'The full image id (sha256:...) computers are created from' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from update" -l network -d 'How computers reach the network' -r -f -a "none\t'no network interface but loopback (the default)'
public-web\t'public addresses on ports 80/443 through the Runner\'s egress proxy only'"
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from update" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from update" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from update" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from update" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from egress-log" -l computer -d 'Only this computer\'s decisions (id or unique id prefix)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from egress-log" -l limit -d 'How many, newest first' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from egress-log" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from egress-log" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from egress-log" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from egress-log" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from disable" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from disable" -s y -l yes -d 'Do not ask for confirmation'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from disable" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from disable" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from disable" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "run" -d 'Run this machine\'s Runner: connect out to the control plane and execute its commands'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "backup" -d 'Back up a Runner\'s data directory: receipts, Hermes sessions, computer records and workspaces (takes the maintenance lock: the Runner must be stopped; its computers are stopped and that is confirmed)'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "restore" -d 'Restore a Runner\'s data directory from `yy runner backup` (takes the maintenance lock; workspace roots stay in place and get the backup\'s contents)'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "register" -d 'Register a Runner for a source and write its private runner.json (mode 0600)'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "list" -d 'List Runners (tokens are never shown)'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one Runner by id or unique id prefix'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "ping" -d 'Send pings through the Runner\'s command queue and show each round trip'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "fetch" -d 'Export a file from the Runner\'s machine (it must lie inside the Runner\'s artifactRoots)'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "sessions" -d 'List the live Hermes sessions of a Runner\'s own channel'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "commands" -d 'List a Runner\'s recent commands and their states'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "cancel" -d 'Cancel a command: a queued one never runs; a running one is stopped on the Runner'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "update" -d 'Change how a Runner\'s next computers start: the image and/or the network mode'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "egress-log" -d 'Show the egress proxy\'s recent decisions on a Runner (newest first)'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "disable" -d 'Disable a Runner: its token stops working at once and for good'
complete -c yy -n "__fish_yy_using_subcommand runner; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand chat" -l session -d 'Continue this session instead of starting a new one' -r
complete -c yy -n "__fish_yy_using_subcommand chat" -l attach -d 'Put FILE into a computer agent\'s workspace before the turn (repeatable; at most 16 MiB each, 8 files; the model is told where it is). Paths in the message itself are never read from this machine' -r -F
complete -c yy -n "__fish_yy_using_subcommand chat" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand chat" -l json -d 'Print events as JSON lines (NDJSON) instead of text'
complete -c yy -n "__fish_yy_using_subcommand chat" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand chat" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "create" -d 'Provision (or return) the private computer of a computer agent, and wait until it runs'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "list" -d 'List computers'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "ls" -d 'List computers'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "show" -d 'Show one computer (id or unique id prefix)'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "stop" -d 'Stop a computer: its container is removed, its workspace kept; the next create recreates it'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "rm" -d 'Remove a computer and delete its workspace'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "exec" -d 'Run a diagnostic command in a running computer (audited; exit 1 when it fails)'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "audit" -d 'Show the audit log of operator actions on computers, newest first'
complete -c yy -n "__fish_yy_using_subcommand computer; and not __fish_seen_subcommand_from create list ls show stop rm exec audit help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from create" -l agent -d 'A --env computer agent' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from create" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from create" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from create" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from list" -l removed -d 'Include removed computers'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from ls" -l removed -d 'Include removed computers'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from stop" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from stop" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from stop" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from stop" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from rm" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from rm" -s y -l yes -d 'Do not ask for confirmation'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from rm" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from rm" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from rm" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from exec" -l timeout -d 'Kill the command\'s process tree after this long' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from exec" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from exec" -l json -d 'Print the result as JSON'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from exec" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from exec" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from audit" -l limit -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from audit" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from audit" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from audit" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from audit" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "create" -d 'Provision (or return) the private computer of a computer agent, and wait until it runs'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "list" -d 'List computers'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one computer (id or unique id prefix)'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "stop" -d 'Stop a computer: its container is removed, its workspace kept; the next create recreates it'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "rm" -d 'Remove a computer and delete its workspace'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "exec" -d 'Run a diagnostic command in a running computer (audited; exit 1 when it fails)'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "audit" -d 'Show the audit log of operator actions on computers, newest first'
complete -c yy -n "__fish_yy_using_subcommand computer; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -f -a "list" -d 'List sessions, newest first'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -f -a "ls" -d 'List sessions, newest first'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -f -a "show" -d 'Show a session and its transcript'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -f -a "stop" -d 'Interrupt a session\'s turn and confirm on the Runner that it is idle or gone'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -f -a "close" -d 'Close a session for good (its Hermes session is closed; nothing else is touched)'
complete -c yy -n "__fish_yy_using_subcommand session; and not __fish_seen_subcommand_from list ls show stop close help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from list" -l agent -d 'Only this agent\'s sessions' -r
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from ls" -l agent -d 'Only this agent\'s sessions' -r
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from stop" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from stop" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from stop" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from stop" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from close" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from close" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from close" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from close" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from help" -f -a "list" -d 'List sessions, newest first'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show a session and its transcript'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from help" -f -a "stop" -d 'Interrupt a session\'s turn and confirm on the Runner that it is idle or gone'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from help" -f -a "close" -d 'Close a session for good (its Hermes session is closed; nothing else is touched)'
complete -c yy -n "__fish_yy_using_subcommand session; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -f -a "list" -d 'List artifacts, newest first (yours; an admin sees all)'
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -f -a "ls" -d 'List artifacts, newest first (yours; an admin sees all)'
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -f -a "show" -d 'Show an artifact and where it came from'
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -f -a "get" -d 'Download an artifact, check its SHA-256 and write it atomically'
complete -c yy -n "__fish_yy_using_subcommand artifact; and not __fish_seen_subcommand_from list ls show get help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from list" -l session -d 'Only this session\'s artifacts' -r
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from list" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from list" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from ls" -l session -d 'Only this session\'s artifacts' -r
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from ls" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from show" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from show" -l json -d 'Print JSON instead of a table'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from get" -s o -l output -d 'Where to write it (`-` for stdout)' -r -F
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from get" -l server -d 'The yy server to talk to (overrides YY_SERVER and the stored login\'s server)' -r
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from get" -l force -d 'Replace FILE if it exists'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from get" -s h -l help -d 'Print help'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from get" -s V -l version -d 'Print version'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from help" -f -a "list" -d 'List artifacts, newest first (yours; an admin sees all)'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show an artifact and where it came from'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from help" -f -a "get" -d 'Download an artifact, check its SHA-256 and write it atomically'
complete -c yy -n "__fish_yy_using_subcommand artifact; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "serve" -d 'Run the control plane: the admin API and the machine API for Runners'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "admin" -d 'Administer a data directory locally (e.g. create the first admin)'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "login" -d 'Log in to a yy server and store an API token for later commands'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "backup" -d 'Back up the control plane\'s data directory, and verify backups'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "restore" -d 'Restore the control plane\'s data directory from a backup (`yy serve` must be stopped)'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "bench" -d 'Benchmarks on this machine: command dispatch, computers, the egress proxy, backup, computer agents\' turns and artifacts'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "image" -d 'Build, verify and list the computer image (on the local Docker engine)'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "guest" -d 'The guest agent inside a computer (run by the Runner, not by hand)'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "egress" -d 'The egress proxy of public-web computers (run by the Runner, not by hand)'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "completions" -d 'Print a shell completion script'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "man" -d 'Write man pages'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "logout" -d 'Revoke the stored API token on the server and forget it'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "whoami" -d 'Show the account behind the current login'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "account" -d 'Manage accounts (admins only)'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "token" -d 'API tokens: list, revoke'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "source" -d 'Manage sources: the Hermes connections Bots come from'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "profile" -d 'Manage profiles: a Hermes profile and its guest working directory'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "agent" -d 'Manage agents: persistent identities with a profile and an execution environment'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "runner" -d 'Register and manage Runners, the execution hosts next to Hermes'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "chat" -d 'Send a message to an agent and stream its reply'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "computer" -d 'Isolated computers of computer agents: create, list, show, stop, rm, exec, audit'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "session" -d 'Bot sessions: list, show the transcript, stop, close'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "artifact" -d 'Files exported from computers and fetched from Runners: list, show, get'
complete -c yy -n "__fish_yy_using_subcommand help; and not __fish_seen_subcommand_from serve admin login backup restore bench image guest egress completions man logout whoami account token source profile agent runner chat computer session artifact help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "create" -d 'Create an admin account directly in a data directory (how the first admin is made)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from backup" -f -a "create" -d 'Back up the control plane\'s data directory into one archive (works while `yy serve` runs: the database is copied with SQLite\'s online backup)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from backup" -f -a "verify" -d 'Check every entry of an archive against its manifest and the database\'s integrity; `--json` lists what it holds'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "dispatch" -d 'Measure command dispatch on this machine: pickup latency, throughput, Runner memory when idle and control plane memory under idle long-polls'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "computer" -d 'Measure computers side by side with the docker CLI: cold start (create to guest agent ready) against `docker run --rm IMAGE true`, and a tool round trip (`exec true` through the guest agent) against `docker exec CONTAINER true`'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "artifacts" -d 'Measure verified artifacts side by side with plain copies: a 25 MiB `computer_export` against `docker cp` + `sha256sum`, and `yy runner fetch` of an 8 MB file against `cp` + `sha256sum` (whole processes)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "backup" -d 'Measure `yy backup create` plus `yy backup verify` of a generated data directory (a database and many artifact files) against `tar -cf` plus `sha256sum` of every file of the same tree, alternating rounds in the same run'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "turn" -d 'Measure a computer agent\'s turn (the isolated Worker, its tool in the agent\'s computer) against a host agent\'s turn with the same scripted model: one tool call, then the answer'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "egress" -d 'Measure the egress proxy on loopback: added connect latency (CONNECT and its answer against a direct connect) and bulk throughput through the tunnel against direct'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from image" -f -a "build" -d 'Build the computer image from Debian packages (no registry needed); prints the full image ID as the last line'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from image" -f -a "verify" -d 'Start a throw-away hardened computer from IMAGE_ID and check it; exits 1 if any check fails'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from image" -f -a "list" -d 'List the yy computer images on this Docker engine'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from guest" -f -a "serve" -d 'Speak the guest protocol (JSON lines) on stdin/stdout until stdin closes'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from egress" -f -a "serve" -d 'Run the egress proxy (the Runner starts it in a container; not usually run by hand)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from account" -f -a "list" -d 'List accounts'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from account" -f -a "show" -d 'Show one account'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from account" -f -a "create" -d 'Create an account (password from a terminal prompt or --password-stdin)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from account" -f -a "disable" -d 'Disable an account: it can no longer log in, and its tokens are revoked at once'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from account" -f -a "enable" -d 'Enable a disabled account (its old tokens stay revoked)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from account" -f -a "passwd" -d 'Set a password (yours by default; admins may set any account\'s). Every other token of the account is revoked'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "list" -d 'List live API tokens (yours; an admin\'s lists every account\'s)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "revoke" -d 'Revoke a token by id: it stops working at once'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "list" -d 'List sources'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "show" -d 'Show one source'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "create" -d 'Create a source'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "update" -d 'Change a source\'s description'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from source" -f -a "archive" -d 'Archive a source that no active agent or enabled Runner uses'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from profile" -f -a "list" -d 'List profiles'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from profile" -f -a "show" -d 'Show one profile'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from profile" -f -a "create" -d 'Create a profile (NAME is the Hermes profile name)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from profile" -f -a "update" -d 'Change a profile\'s guest terminal.cwd'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from profile" -f -a "archive" -d 'Archive a profile that no active agent uses'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "list" -d 'List agents'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "show" -d 'Show one agent'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "create" -d 'Create an agent (at most 100 active agents per account)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "update" -d 'Change an agent\'s profile, environment or team management (applies from its next turn)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "archive" -d 'Archive an agent (frees its slot; its records stay)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "run" -d 'Run this machine\'s Runner: connect out to the control plane and execute its commands'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "backup" -d 'Back up a Runner\'s data directory: receipts, Hermes sessions, computer records and workspaces (takes the maintenance lock: the Runner must be stopped; its computers are stopped and that is confirmed)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "restore" -d 'Restore a Runner\'s data directory from `yy runner backup` (takes the maintenance lock; workspace roots stay in place and get the backup\'s contents)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "register" -d 'Register a Runner for a source and write its private runner.json (mode 0600)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "list" -d 'List Runners (tokens are never shown)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "show" -d 'Show one Runner by id or unique id prefix'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "ping" -d 'Send pings through the Runner\'s command queue and show each round trip'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "fetch" -d 'Export a file from the Runner\'s machine (it must lie inside the Runner\'s artifactRoots)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "sessions" -d 'List the live Hermes sessions of a Runner\'s own channel'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "commands" -d 'List a Runner\'s recent commands and their states'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "cancel" -d 'Cancel a command: a queued one never runs; a running one is stopped on the Runner'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "update" -d 'Change how a Runner\'s next computers start: the image and/or the network mode'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "egress-log" -d 'Show the egress proxy\'s recent decisions on a Runner (newest first)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from runner" -f -a "disable" -d 'Disable a Runner: its token stops working at once and for good'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from computer" -f -a "create" -d 'Provision (or return) the private computer of a computer agent, and wait until it runs'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from computer" -f -a "list" -d 'List computers'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from computer" -f -a "show" -d 'Show one computer (id or unique id prefix)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from computer" -f -a "stop" -d 'Stop a computer: its container is removed, its workspace kept; the next create recreates it'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from computer" -f -a "rm" -d 'Remove a computer and delete its workspace'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from computer" -f -a "exec" -d 'Run a diagnostic command in a running computer (audited; exit 1 when it fails)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from computer" -f -a "audit" -d 'Show the audit log of operator actions on computers, newest first'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from session" -f -a "list" -d 'List sessions, newest first'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from session" -f -a "show" -d 'Show a session and its transcript'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from session" -f -a "stop" -d 'Interrupt a session\'s turn and confirm on the Runner that it is idle or gone'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from session" -f -a "close" -d 'Close a session for good (its Hermes session is closed; nothing else is touched)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from artifact" -f -a "list" -d 'List artifacts, newest first (yours; an admin sees all)'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from artifact" -f -a "show" -d 'Show an artifact and where it came from'
complete -c yy -n "__fish_yy_using_subcommand help; and __fish_seen_subcommand_from artifact" -f -a "get" -d 'Download an artifact, check its SHA-256 and write it atomically'
