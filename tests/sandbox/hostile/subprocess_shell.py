# ruff: noqa  (a hostile program for the sandbox, kept as written)
# subprocess with a shell
# expect: error
import subprocess
subprocess.check_output('cat /etc/hostname', shell=True)
