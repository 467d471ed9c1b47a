#!/bin/bash
#SBATCH --array=0-2%2
#SBATCH --job-name=dse-c1-r1
#SBATCH '--comment=dse campaign=c1 trials=1,2,3'
#SBATCH --time=0-01:00:00
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --gres=gpu:1
#SBATCH --mem=2048M
#SBATCH --partition=debug
#SBATCH '--account=proj 42'
#SBATCH --qos=normal
#SBATCH '--constraint=a100&ib'
#SBATCH --exclusive
#SBATCH --exclude=n1,n2
#SBATCH --signal=B:USR1@120
#SBATCH --no-requeue
#SBATCH --open-mode=append
#SBATCH '--output=/scratch/my campaign/.dse/slurm/%A_%a.out'
#SBATCH '--error=/scratch/my campaign/.dse/slurm/%A_%a.err'
#SBATCH --mail-type=END
#SBATCH --hint=nomultithread

# setup from the campaign file
set -e
module load python/3.11
source '/opt/my env/bin/activate'
set +e

# task i runs line i+1 of the manifest (see dse_slurm._script)
exec python3 -c 'import fcntl, json, os, stat, sys
path, index = sys.argv[1], int(sys.argv[2])
with open(path, encoding="utf-8") as handle:
    for number, line in enumerate(handle):
        if number == index:
            break
    else:
        sys.exit("dse: no line %d in the manifest %s" % (index + 1, path))
job = json.loads(line)
env = dict(os.environ)
env.update(job["env"])
# The place of this task in the attempt (the trial contract): from srun, or the batch job.
for key, name in (("DSE_RANK", "SLURM_PROCID"), ("DSE_LOCAL_RANK", "SLURM_LOCALID"),
                  ("DSE_NODE_RANK", "SLURM_NODEID"), ("DSE_WORLD_SIZE", "SLURM_NTASKS"),
                  ("DSE_NODE", "SLURMD_NODENAME")):
    if os.environ.get(name):
        env[key] = os.environ[name]
# The attempt'"'"'s nodes: expanded by whoever started several tasks (the batch script, the
# pilot); one task'"'"'s are its own node.
if not env.get("DSE_NODES") and env.get("DSE_NODE"):
    env["DSE_NODES"] = env["DSE_NODE"]
rank = int(env.get("DSE_RANK") or 0)
names = ("stdout.log", "stderr.log") if rank == 0 else (
    "stdout.%d.log" % rank, "stderr.%d.log" % rank)
adir = os.path.join(job["trial_dir"], "attempt-%d" % job["attempt"])
os.makedirs(adir, exist_ok=True)
os.makedirs(os.path.join(job["trial_dir"], "checkpoint"), exist_ok=True)
for fd, name in zip((1, 2), names):
    # Never through a symlink, never blocking on a FIFO an earlier attempt left there.
    try:
        out = os.open(os.path.join(adir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND
                      | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        sys.exit("dse: cannot open %s for the trial'"'"'s output: %s" % (name, exc))
    if not stat.S_ISREG(os.fstat(out).st_mode):
        sys.exit("dse: %s in %s is not a regular file" % (name, adir))
    fcntl.fcntl(out, fcntl.F_SETFL, fcntl.fcntl(out, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    os.dup2(out, fd)
    os.close(out)
if job.get("path"):
    env["PATH"] = os.pathsep.join(job["path"] + [env.get("PATH", "")])
try:
    os.chdir(job["cwd"])
    os.execvpe(job["argv"][0], job["argv"], env)
except OSError as exc:
    why = "cannot run %r: %s" % (job["argv"][0], exc)
    sys.stderr.write("dse: %s\n" % why)
    # The note tells this apart from a command that exits 127 itself.
    # Every task of the attempt fails alike: each writes through a temporary file of its own.
    tmp = os.path.join(adir, "%s.%s-%d.tmp" % ("dse-launch.json", os.uname().nodename, os.getpid()))
    with open(tmp, "w") as note:
        json.dump({"invalid": why}, note)
    os.replace(tmp, os.path.join(adir, "dse-launch.json"))
    sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)
' \
    '/scratch/my campaign/.dse/slurm/batch 1.jsonl' "${SLURM_ARRAY_TASK_ID:?}"
