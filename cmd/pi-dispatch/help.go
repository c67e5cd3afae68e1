package main

// The help text of each command, printed by `pi-dispatch help <command>` and
// `pi-dispatch <command> --help`. A test checks that each names every flag
// its command parses.

const killSwitchVars = `
Reads only VALKEY_URL and VALKEY_PASSWORD, so no other misconfiguration can
stop it: a malformed line elsewhere in the env file is a warning naming the
line, never a refusal. Exits 1 naming the fix when Valkey cannot be reached or refuses the
password. See docs/fleet.md.
`

const pauseHelp = `usage: pi-dispatch pause

The kill switch: pauses every queue of the fleet (the shared queue and every
host's queue) and sets the fleet-wide pause flag, so no worker takes a new job.
Running jobs finish; jobs can still be queued and wait for resume.
` + killSwitchVars

const resumeHelp = `usage: pi-dispatch resume

Resumes every queue of the fleet and clears the fleet-wide pause flag, so the
workers take jobs again.
` + killSwitchVars

const statusHelp = `usage: pi-dispatch status [--per-queue] [--json]

Prints whether the fleet is paused and the job counts of its queues by state
and, for finished jobs, by outcome: completed, refused (a policy outcome),
cancelled and failed.

flags:
  --per-queue   add one row per queue under the fleet's total
  --json        print one JSON line instead of a table, for scripts
` + killSwitchVars

const hostsHelp = `usage: pi-dispatch hosts [--json]

Lists the fleet's live hosts from the registry: each worker's name, age of its
last heartbeat, whether it routes, its capabilities, image and version.

flags:
  --json   print one JSON array instead of a table
` + killSwitchVars

const cancelHelp = cancelUsage + `

Removes a job that has not started (waiting, delayed or held) from its queue,
or asks the worker running it to stop its container and waits for that worker
to acknowledge.

flags:
  --wait DURATION   how long to wait for the worker running the job to
                    acknowledge (default 10s)
` + killSwitchVars

const runHelp = runUsage + `
flags:
  --task TEXT       the instruction for the agent; "-" reads it from stdin
  --task-file PATH  read the instruction from a file (for a long task)
  --flow NAME       the agent flow to run (default "default"; docs/flows.md)
  --command CMD     a prompt command to run instead of a flow
  --image IMG       the job image for this run (default PI_JOB_IMAGE; never pulled)
  --new             queue a new job even when the same run was queued this minute
  --force           queue even when the folder has uncommitted git changes or is
                    outside any git repository
  --env-file PATH   the env file under the shell's variables, instead of
                    $PI_ENV_FILE or ./.env ("" reads none)

Reads VALKEY_URL, VALKEY_PASSWORD and PI_WORKER_NAME; see docs/configuration.md.
`

const doctorHelp = doctorUsage + `
flags:
  --env-file PATH   the env file under the shell's variables, instead of
                    $PI_ENV_FILE or ./.env ("" reads none)

Checks Valkey, Docker, the job image, the configuration (every variable of
docs/configuration.md), the files it names, and the fleet's hosts.
`

const initHelp = initUsage + `
flags:
  --dir DIR   the deployment folder (default: the current folder)

Then edit .env (every variable is in docs/configuration.md), run
pi-dispatch doctor, and start the worker.
`

const serviceHelp = serviceUsage + `
flags:
  --dir DIR           the deployment folder holding .env (default: the current folder)
  --worker-bin PATH   absolute path of the worker binary (default /usr/local/bin/pi-dispatch-worker)
  --user NAME         the user the worker runs as, in group docker ("" runs it as root;
                      default pi-dispatch)
`

const demoHelp = demoUsage + `
flags:
  --keep             keep the temporary folders (workspace, run records) and print where they are
  --timeout DURATION give up after this long, the image build included (default 3m)
`

const dashHelp = dashUsage + `

Serves a web dashboard of the fleet on this machine and prints its URL: the
hosts (age of their last beat, capabilities, running jobs), the queues' counts
and pause state, held and running jobs, recent runs with their outcome and
cost, the container starts of the day and week against their caps, the
fleet's capacity (as pi-dispatch capacity), and charts of where the money and
the time went: spend per day by repository, trigger or model, runs per hour
by outcome, queue wait, cost per run and the merged share of pull requests.
The page reads the fleet every few seconds; Ctrl-C stops the server.

flags:
  --listen ADDR     the address to serve on (default 127.0.0.1:8477; port 0
                    picks a free one)
  --allow-actions   add Pause, Resume and Cancel buttons; each asks for a
                    confirmation. Without it the dashboard changes nothing.
  --allow-remote    serve on an address that is not loopback (refused without
                    it: the dashboard has no login; prefer an SSH tunnel)

Reads VALKEY_URL, VALKEY_PASSWORD, PI_DAILY_CAP, PI_WEEKLY_CAP and
PI_WORKER_NAME (the name a cancel is recorded under). See docs/dashboard.md.
`

const capacityHelp = capacityUsage + `

Shows what the fleet can run and how long its backlog lasts: each live host's
slots (its concurrency), the jobs it runs now and that share of its slots, the
jobs waiting on its own queue, its runs per hour over the last hour and the
time its queue takes to drain at that rate; each queue's waiting, delayed and
active jobs; and the fleet's totals, with the time every waiting job takes at
the fleet's rate ("no rate" when jobs wait and no run ended in the last hour).
A registry row the fleet key did not sign is marked untrusted and adds no
slots, as routing sends it nothing.

flags:
  --json   print the report as one JSON line, for scripts

Reads VALKEY_URL, VALKEY_PASSWORD, PI_LOGS_DIR (this host's runs not yet in
the run mirror), PI_FLEET_KEY_FILE and PI_UNSIGNED_QUEUES. See
docs/operations.md.
`
