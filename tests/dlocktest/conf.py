"""The daemon's configuration file, written from Python values: YAML
scalars, lists and maps (yaml_value), a backend section (backend_section)."""

import re


def yaml_str(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[%s]" % ", ".join(yaml_value(x) for x in v)
    if isinstance(v, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, yaml_value(x)) for k, x in v.items())
    return yaml_str(str(v))


BACKEND_SECTION_RE = re.compile(r"^backend\s*:", re.M)


def backend_section(conf):
    """A "backend:" section (YAML text) of the keys of conf, a dict; a
    dict value is a section of its own (e.g. tls)."""
    text = "backend:\n"
    for k, v in conf.items():
        if isinstance(v, dict):
            text += "  %s:\n" % k + "".join("    %s: %s\n" % (k2, yaml_value(v2))
                                            for k2, v2 in v.items())
        else:
            text += "  %s: %s\n" % (k, yaml_value(v))
    return text

