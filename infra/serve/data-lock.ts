import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";

/** The lock file of a data folder: the pids of the serve process that owns it and of its workerd. */
export const LOCK_FILE = "serve.pid";

/** Whether a process with this pid is alive (signal 0 tests without signalling). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** A data folder taken by this process (see lockDataDir). */
export interface DataLock {
  /** Records workerd's pid too: a workerd left running by a killed launcher still holds the folder. */
  holdFor(pid: number): void;
  /** Gives the folder up (idempotent; removes the file only while it is still ours). */
  release(): void;
}

/**
 * Takes the data folder for this process, or throws naming the live process that holds it: two
 * workerd processes on one Durable Object storage would each think they own every object and
 * write past each other. A lock whose processes are all gone (a crash, a SIGKILL) is taken over.
 */
export function lockDataDir(data: string): DataLock {
  const file = path.join(data, LOCK_FILE);
  for (;;) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: "wx" });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const holders = readFileSync(file, "utf8").trim().split(/\s+/).map(Number);
      const holder = holders.find((pid) => Number.isInteger(pid) && pid > 0 && alive(pid));
      if (holder !== undefined)
        throw new Error(`the data folder ${data} is in use by process ${holder} (${file})`, { cause: error });
      rmSync(file, { force: true });
    }
  }
  let held = true;
  const ours = () => {
    try {
      return readFileSync(file, "utf8").trim().split(/\s+/)[0] === String(process.pid);
    } catch {
      return false;
    }
  };
  return {
    holdFor: (pid) => {
      if (held && ours()) writeFileSync(file, `${process.pid} ${pid}\n`);
    },
    release: () => {
      if (!held) return;
      held = false;
      if (ours()) rmSync(file, { force: true });
    },
  };
}
