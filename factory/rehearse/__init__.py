"""A campaign rehearsed: the seed's plan in the queue, thousands of sessions through the real queue, runner
processes, proxies and spool with the scripted brain as target and the rehearsal agent in place of the
sandboxes, faults injected on request, then the export; a report of what each stage sustained
(docs/factory.md, "Rehearsing a campaign")."""
