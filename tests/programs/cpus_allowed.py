"""The calling process's CPUs as Linux lists them (Cpus_allowed_list), for the
binding test programs bind_spawn.py and bind_warm.py."""


def cpus():
    for line in open("/proc/self/status"):
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return "?"
