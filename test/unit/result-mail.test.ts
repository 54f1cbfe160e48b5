import { describe, expect, it } from "vitest";
import { MAIL_SKIPPED_SHOWN, resultMessage } from "../../shared/store/flow-records.js";
import { started, T, jobIn } from "./flow-sim.js";

// A flow's result mail says which jobs were skipped and why: all of them in flow_result.skipped
// (as the flow's view does), the first few in its readable text.

describe("a flow's result mail", () => {
  it("names each skipped job and why, in its text and in flow_result", () => {
    const d = started([
      jobIn({ name: "check" }),
      jobIn({ name: "ship", depends: ["check"], when: 'deps.check.ok == "yes"' }),
      jobIn({ name: "wrap", depends: ["ship"] }),
      jobIn({ name: "report", depends: ["ship"], needs: "all_done" }),
    ]);
    d.run(100, { result: { ok: "no" } });
    d.run(103);
    expect(d.state.status).toBe("finished");
    const mail = resultMessage(d.state, T + 10_000);
    expect(mail.message.split("\n")).toEqual([
      "flow 7 finished: 2 jobs finished, 2 skipped",
      'skipped: ship: when is false: deps.check.ok == "yes"',
      "skipped: wrap: dependency ship was skipped (needs: all_finished)",
    ]);
    expect(mail.flow_result).toEqual({
      flow_id: 7,
      status: "finished",
      skipped: {
        ship: 'when is false: deps.check.ok == "yes"',
        wrap: "dependency ship was skipped (needs: all_finished)",
      },
    });
  });

  it("says nothing of skips when none was", () => {
    const d = started([jobIn({ name: "a" })]);
    d.run(100);
    const mail = resultMessage(d.state, T + 10_000);
    expect(mail.message).toBe("flow 7 finished: 1 job finished");
    expect(mail.flow_result).not.toHaveProperty("skipped");
  });

  it(`names at most ${MAIL_SKIPPED_SHOWN} in its text, and how many more; flow_result has them all`, () => {
    const n = MAIL_SKIPPED_SHOWN + 5;
    const d = started([
      jobIn({ name: "a" }),
      ...Array.from({ length: n }, (_, i) => jobIn({ name: `b${i}`, depends: ["a"], when: "false" })),
    ]);
    d.run(100);
    expect(d.state.status).toBe("finished");
    const mail = resultMessage(d.state, T + 10_000);
    const lines = mail.message.split("\n");
    expect(lines).toHaveLength(1 + MAIL_SKIPPED_SHOWN + 1);
    expect(lines[1]).toBe("skipped: b0: when is false: false");
    expect(lines.at(-1)).toBe("skipped: 5 more (flow_result.skipped and the flow's view list them all)");
    expect(Object.keys(mail.flow_result?.skipped ?? {})).toHaveLength(n);
  });
});
