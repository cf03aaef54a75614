# ruff: noqa  (a hostile program for the sandbox, kept as written)
# /proc/1/environ: unreadable by a job; gVisor lets any uid read it, and there it holds the jail's environment only;
# a service's container has no /proc in its jobs' root
# expect: error
# expect-gvisor: ok
# expect-container: error
keys = {entry.split('=')[0] for entry in open('/proc/1/environ').read().split('\0') if entry}
if keys - {'PYTHONHASHSEED', 'PATH', 'HOME', 'LANG', 'LD_LIBRARY_PATH'}:
    print('ESCAPED', sorted(keys))
