# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_snapctl_global_optspecs
    string join \n socket= config= json timeout= h/help V/version
end

function __fish_snapctl_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_snapctl_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_snapctl_using_subcommand
    set -l cmd (__fish_snapctl_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c snapctl -n "__fish_snapctl_needs_command" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_needs_command" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_needs_command" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_needs_command" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_needs_command" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_needs_command" -s V -l version -d 'Print version'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "dump" -d 'Take a snapshot now and print its path (`perf script -i PATH` reads it)'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "list" -d 'List the snapshots, oldest first'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "rotate" -d 'Apply retention now; each option tightens the configured limit for this call only'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "compress" -d 'Replace a snapshot by its zstd-compressed form (atomically)'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "status" -d 'Show events, rings, loss counters, tracking health, store usage and the last dump\'s timings'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "watch" -d 'Print snapshot, loss and trigger events as they happen'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "reload" -d 'Make the daemon re-read its config (a bad file is rejected and the running config kept)'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "triggers" -d 'List the configured [[trigger]] conditions: how often each fired, dumped and was held by its rate limit, and when it last fired'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "archive" -d 'Write a tarball of a snapshot and the files its samples need, named by build-id (like `perf archive`): extract it into DIR and run `perf --buildid-dir DIR report -i ID.perf.data` on any machine. Runs with your rights: files you cannot read are listed as missing. The tarball gets the snapshot\'s mode and group, without access for other users when it holds the kernel\'s symbols (kallsyms)'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "decompress" -d 'Write a plain (uncompressed) copy of a compressed snapshot, for readers without zstd (hotspot\'s perfparser)'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "report" -d 'Write one HTML page that shows a snapshot: the window and its losses, a per-CPU timeline of what ran (sched_switch), flame graphs of the sampled events (on CPU) and of the time threads waited (off CPU, from sched_switch call chains), and the top processes and threads. Self-contained: open it in any browser, offline. Frames are named on this machine from files whose build-id matches the snapshot\'s (see --symfs); the others show as FILE+0xOFFSET'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "export" -d 'Write a snapshot\'s stacks for other tools: `pprof` (gzipped profile.proto with two sample types, `samples` of one event and `off_cpu` nanoseconds: go tool pprof, Pyroscope, Parca) or `collapsed` (folded stacks, `comm;root;...;leaf COUNT`: flamegraph.pl, inferno, speedscope)'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "fleet" -d 'Talk to every daemon of the fleet over NATS ([fleet] in the config): ask them all for a snapshot (dump), list what they uploaded into the JetStream object store (list), download one (fetch)'
complete -c snapctl -n "__fish_snapctl_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l label -d 'Free text added to the file name: letters, digits, \'.\', \'_\', \'-\', at most 64 characters, not starting with \'.\'' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l at -d 'Cut the window around TIME instead of now: RFC 3339 (2026-11-23T21:04:05Z) or relative to now (-5m, +30s). In the past, --before defaults to 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l before -d 'Start the window DUR before TIME (default: as far back as the memory rings hold when TIME is now)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l after -d 'End the window DUR after TIME: the rings keep recording until then (default: the configured post_trigger_delay when TIME is now)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l compress -d 'Compress with zstd even if the daemon\'s config says "none"'
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand dump" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand list" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand list" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand list" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand list" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand list" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l keep -d 'Keep at most N snapshots (the newest), N >= 1 (see --all)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l max-bytes -d 'Keep at most SIZE bytes of snapshots, e.g. 500MiB' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l max-age -d 'Remove snapshots older than DUR, e.g. 2h or 7d' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l all -d 'Remove every snapshot. Without it, a rotate that would remove them all is refused and removes nothing'
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand rotate" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand compress" -l level -d 'zstd level 1..=22 (default: the configured level)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand compress" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand compress" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand compress" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand compress" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand compress" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand status" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand status" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand status" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand status" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand status" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand watch" -l count -d 'Exit after N events' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand watch" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand watch" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand watch" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand watch" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand watch" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand reload" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand reload" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand reload" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand reload" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand reload" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand triggers" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand triggers" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand triggers" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand triggers" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand triggers" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -s o -l output -d 'The tarball to write. Default: ./ID.tar' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -l no-kallsyms -d 'Leave out /proc/kallsyms (kernel symbol addresses): kernel frames then resolve only where the reader has the same kernel'
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -l force -d 'Replace FILE if it exists'
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand archive" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand decompress" -s o -l output -d 'The copy to write (with the snapshot\'s mode and group). Default: ./ID.plain.perf.data' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand decompress" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand decompress" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand decompress" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand decompress" -l force -d 'Replace FILE if it exists'
complete -c snapctl -n "__fish_snapctl_using_subcommand decompress" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand decompress" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -s o -l output -d 'The page to write. Default: ./ID.html' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l symfs -d 'A build-id cache or root directory holding the snapshot\'s files (an unpacked `snapctl archive`, ~/.debug); repeat for several' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l kallsyms -d 'A kallsyms file of the snapshot\'s kernel (default: the archive\'s, or /proc/kallsyms when this machine runs that kernel)' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l no-local-files -d 'Use only --symfs and --kallsyms, not this machine\'s files'
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l force -d 'Replace FILE if it exists'
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand report" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l format -r -f -a "pprof\t'gzipped profile.proto (`go tool pprof`, Pyroscope, Parca)'
collapsed\t'Folded stacks (flamegraph.pl, inferno, speedscope)'"
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -s o -l output -d 'The file to write, or - for standard output (then --json\'s summary goes to stderr). Default: ./ID.pb.gz (pprof) or ./ID.folded (collapsed)' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l event -d 'The sampled event to count (default: the snapshot\'s first event with a frequency or period, e.g. cpu-clock)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l symfs -d 'A build-id cache or root directory holding the snapshot\'s files (an unpacked `snapctl archive`, ~/.debug); repeat for several' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l kallsyms -d 'A kallsyms file of the snapshot\'s kernel (default: the archive\'s, or /proc/kallsyms when this machine runs that kernel)' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l off-cpu -d 'collapsed: off-CPU time in microseconds instead of samples'
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l no-local-files -d 'Use only --symfs and --kallsyms, not this machine\'s files'
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l force -d 'Replace FILE if it exists'
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l nats -d 'A NATS server. Default: nats of [fleet] in /etc/flightrec/flightrec.toml, else nats://127.0.0.1:4222' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l subject -d 'Subject prefix. Default: subject of [fleet], else flightrec' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l bucket -d 'The JetStream object store bucket of the uploads (list, fetch). Default: bucket of [fleet], else flightrec' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l creds -d 'A NATS credentials file. Default: creds of [fleet]' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l user -d 'A NATS user (with --password-file). Default: user of [fleet]' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l password-file -d 'The file holding --user\'s password' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -f -a "dump" -d 'Ask every daemon (or those --select picks) for a snapshot; print one line per host that answered within --wait, and the --expect hosts that did not. Exit status 1 when a host failed or did not answer'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -f -a "list" -d 'List the snapshots the daemons uploaded into the bucket'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -f -a "fetch" -d 'Download one snapshot of the bucket; print the path written'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and not __fish_seen_subcommand_from dump list fetch help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l label -d 'The snapshots\' label (see `snapctl dump --label`)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l select -d 'Only hosts whose [fleet] labels have KEY=VALUE (repeat: all must match; host=NAME matches the fleet host name)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l wait -d 'How long to collect replies, e.g. 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l expect -d 'Hosts that should answer (comma-separated): the ones that did not are listed, and the wait ends once all have answered' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l host -d 'Ask this host only (on <subject>.dump.HOST; expected to answer)' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l at -d 'Every host cuts its window around TIME (see `snapctl dump --at`): a relative TIME is made absolute here, once, so all cut the same wall-clock window' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l before -d 'Start the windows DUR before TIME' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l after -d 'End the windows DUR after TIME' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l compress -d 'Compress with zstd even if a daemon\'s config says "none"'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from dump" -s h -l help -d 'Print help'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from list" -l host -d 'Only the snapshots of this fleet host' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from list" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from list" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from list" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from list" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from fetch" -s o -l output -d 'The file to write (or a directory to write ID.perf.data into). Default: ./ID.perf.data' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from fetch" -l socket -d 'The daemon\'s socket. Default: $FLIGHTREC_SOCKET, else daemon.socket of the daemon\'s config file (see --config), else /run/flightrec/flightrecd.sock' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from fetch" -l config -d 'The daemon\'s config file, read for what snapctl is not told: the socket and, for `fleet`, its [fleet] section. Default: $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it exists. A file named here must read as a valid config' -r -F
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from fetch" -l timeout -d 'Give up (exit status 3) when the daemon does not answer within DUR, e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch` may take longer as long as the daemon answers HTTP/2 pings within DUR. Default: $FLIGHTREC_TIMEOUT, else 10s' -r
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from fetch" -l force -d 'Replace an existing file'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from fetch" -l json -d 'Print JSON (one object; `watch` prints one per line) instead of text'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from fetch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "dump" -d 'Ask every daemon (or those --select picks) for a snapshot; print one line per host that answered within --wait, and the --expect hosts that did not. Exit status 1 when a host failed or did not answer'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the snapshots the daemons uploaded into the bucket'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "fetch" -d 'Download one snapshot of the bucket; print the path written'
complete -c snapctl -n "__fish_snapctl_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "dump" -d 'Take a snapshot now and print its path (`perf script -i PATH` reads it)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "list" -d 'List the snapshots, oldest first'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "rotate" -d 'Apply retention now; each option tightens the configured limit for this call only'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "compress" -d 'Replace a snapshot by its zstd-compressed form (atomically)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "status" -d 'Show events, rings, loss counters, tracking health, store usage and the last dump\'s timings'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "watch" -d 'Print snapshot, loss and trigger events as they happen'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "reload" -d 'Make the daemon re-read its config (a bad file is rejected and the running config kept)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "triggers" -d 'List the configured [[trigger]] conditions: how often each fired, dumped and was held by its rate limit, and when it last fired'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "archive" -d 'Write a tarball of a snapshot and the files its samples need, named by build-id (like `perf archive`): extract it into DIR and run `perf --buildid-dir DIR report -i ID.perf.data` on any machine. Runs with your rights: files you cannot read are listed as missing. The tarball gets the snapshot\'s mode and group, without access for other users when it holds the kernel\'s symbols (kallsyms)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "decompress" -d 'Write a plain (uncompressed) copy of a compressed snapshot, for readers without zstd (hotspot\'s perfparser)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "report" -d 'Write one HTML page that shows a snapshot: the window and its losses, a per-CPU timeline of what ran (sched_switch), flame graphs of the sampled events (on CPU) and of the time threads waited (off CPU, from sched_switch call chains), and the top processes and threads. Self-contained: open it in any browser, offline. Frames are named on this machine from files whose build-id matches the snapshot\'s (see --symfs); the others show as FILE+0xOFFSET'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "export" -d 'Write a snapshot\'s stacks for other tools: `pprof` (gzipped profile.proto with two sample types, `samples` of one event and `off_cpu` nanoseconds: go tool pprof, Pyroscope, Parca) or `collapsed` (folded stacks, `comm;root;...;leaf COUNT`: flamegraph.pl, inferno, speedscope)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "fleet" -d 'Talk to every daemon of the fleet over NATS ([fleet] in the config): ask them all for a snapshot (dump), list what they uploaded into the JetStream object store (list), download one (fetch)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and not __fish_seen_subcommand_from dump list rotate compress status watch reload triggers archive decompress report export fleet help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and __fish_seen_subcommand_from fleet" -f -a "dump" -d 'Ask every daemon (or those --select picks) for a snapshot; print one line per host that answered within --wait, and the --expect hosts that did not. Exit status 1 when a host failed or did not answer'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and __fish_seen_subcommand_from fleet" -f -a "list" -d 'List the snapshots the daemons uploaded into the bucket'
complete -c snapctl -n "__fish_snapctl_using_subcommand help; and __fish_seen_subcommand_from fleet" -f -a "fetch" -d 'Download one snapshot of the bucket; print the path written'
