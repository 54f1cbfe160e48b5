import { GLOBAL_OPTIONS, type Command, type OptionSpecs } from "./command.js";

function optionLines(specs: OptionSpecs): string[] {
  const labels = Object.entries(specs).map(([name, spec]) => {
    const long = `--${name}${spec.value ? ` ${spec.value}` : ""}`;
    return [
      spec.short ? `-${spec.short}, ${long}` : `    ${long}`,
      spec.help + (spec.multiple ? " (repeatable)" : ""),
    ] as const;
  });
  const width = Math.max(...labels.map(([label]) => label.length));
  return labels.map(([label, help]) => `  ${label.padEnd(width)}  ${help}`);
}

function commandList(commands: Command[]): string[] {
  const width = Math.max(...commands.map((c) => c.name.length));
  return commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
}

/** `flowc --help`: every command, the global options, and how configuration is found. */
export function mainHelp(commands: Command[]): string {
  return [
    "flowc: the command line of the flow coordinator, for actors and operators",
    "",
    "Usage: flowc <command> [arguments] [options]",
    "",
    "Commands:",
    ...commandList(commands),
    "",
    "Global options (accepted by every command):",
    ...optionLines(GLOBAL_OPTIONS),
    "",
    "Configuration: a flag wins over its environment variable, which wins over the profile.",
    "Run flowc <command> --help for a command's arguments, options and examples.",
    "",
    "Example:",
    "  flowc keygen --out ~/.config/flowc/key.json",
    "  flowc init --url http://127.0.0.1:8787 --key-file ~/.config/flowc/key.json",
    "  flowc actor register",
    "  flowc context create",
    "  flowc flow submit 1 examples/diamond.yaml --start --watch",
    "",
    "Watching: flowc flow watch <context> <flow> follows one flow live to its end; flowc context",
    "watch <context> follows every flow of a context until Ctrl-C. Both read the coordinator's",
    "event stream and reconnect where they left off when the connection drops.",
    "",
    "Events: a flow's job may wait for an event; flowc event send <context> <name> --key <k>",
    "--data k=v ends every wait of the context for that name and key (docs/flows.md).",
    "",
  ].join("\n");
}

/** `flowc actor --help`: the commands of one group. */
export function groupHelp(group: string, commands: Command[]): string {
  return [
    `Usage: flowc ${group} <command> [arguments] [options]`,
    "",
    "Commands:",
    ...commandList(commands),
    "",
    `Run flowc ${group} <command> --help for a command's arguments, options and examples.`,
    "",
    "Example:",
    ...commands.map((c) => `  ${c.examples.find((e) => e.startsWith(`flowc ${c.name}`)) ?? c.examples[0] ?? ""}`),
    "",
  ].join("\n");
}

/** `flowc <command> --help`: usage line, what it does, its options, and examples. */
export function commandHelp(command: Command): string {
  const own = command.options ?? {};
  const globals = Object.keys(GLOBAL_OPTIONS).filter((name) => !(name in own));
  return [
    `Usage: flowc ${command.usage}`,
    "",
    `${command.summary[0]?.toUpperCase() ?? ""}${command.summary.slice(1)}.`,
    ...(command.details ? ["", command.details] : []),
    "",
    ...(Object.keys(own).length > 0 ? ["Options:", ...optionLines(own), ""] : []),
    `Global options: ${globals.map((n) => `--${n}`).join(", ")} (see flowc --help)`,
    "",
    "Example:",
    ...command.examples.map((e) => `  ${e}`),
    "",
  ].join("\n");
}
