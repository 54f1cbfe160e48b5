import type { Command } from "../command.js";
import { actorCommands } from "./actors.js";
import { contextCommands } from "./contexts.js";
import { eventCommands } from "./events.js";
import { flowCommands } from "./flows.js";
import { keyCommands } from "./keys.js";
import { lifecycleCommands } from "./lifecycle.js";
import { messageCommands } from "./messages.js";
import { deadLetterCommands, dispatchCommands, flowRecoveryCommands } from "./recovery.js";
import { runnerStartCommands } from "./runner-start.js";
import { runnerCommands } from "./runners.js";
import { scheduleCommands } from "./schedules.js";
import { templateCommands } from "./templates.js";

/** Every command, in the order `flowc --help` lists them. */
export const COMMANDS: Command[] = [
  ...keyCommands,
  ...actorCommands,
  ...contextCommands,
  ...dispatchCommands,
  ...runnerCommands,
  ...runnerStartCommands,
  ...flowCommands,
  ...flowRecoveryCommands,
  ...templateCommands,
  ...scheduleCommands,
  ...lifecycleCommands,
  ...messageCommands,
  ...eventCommands,
  ...deadLetterCommands,
];
