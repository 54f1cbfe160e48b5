import { describe, expect, it } from "vitest";
import { cronWords, intervalWords, scheduleWords } from "../../shared/model/cron-words.js";
import { cronProblem } from "../../shared/model/schedule-time.js";

describe("cronWords", () => {
  it.each([
    ["0 9 * * *", "UTC", "every day at 09:00 UTC"],
    ["*/15 * * * *", "UTC", "every 15 minutes"],
    ["* * * * *", "UTC", "every minute"],
    ["0 * * * *", "UTC", "every hour, on the hour"],
    ["5 * * * *", "UTC", "every hour at minute 5"],
    ["0,30 * * * *", "UTC", "at minutes 0 and 30 of every hour"],
    ["0 9,17 * * *", "UTC", "every day at 09:00 and 17:00 UTC"],
    ["0 */2 * * *", "UTC", "every 2 hours, on the hour"],
    ["15 */3 * * *", "UTC", "every 3 hours, at minute 15"],
    ["0 9-17 * * *", "UTC", "every hour from 09:00 to 17:00 UTC"],
    ["*/10 9-17 * * MON-FRI", "UTC", "every 10 minutes from 09:00 to 17:59 UTC, Monday to Friday"],
    ["0 9 * * MON-FRI", "Europe/Berlin", "at 09:00 Europe/Berlin, Monday to Friday"],
    ["0 9 * * 1-5", "UTC", "at 09:00 UTC, Monday to Friday"],
    ["0 9 * * 1,3,5", "UTC", "at 09:00 UTC, Monday, Wednesday and Friday"],
    ["0 0 * * 0", "UTC", "at 00:00 UTC, on Sunday"],
    ["0 0 * * 7", "UTC", "at 00:00 UTC, on Sunday"],
    ["30 2 1 * *", "UTC", "at 02:30 UTC, on day 1 of the month"],
    ["0 12 1,15 * *", "UTC", "at 12:00 UTC, on days 1 and 15 of the month"],
    ["0 8 1 * 1", "UTC", "at 08:00 UTC, on day 1 of the month or on Monday"],
    ["0 0 1 1 *", "UTC", "at 00:00 UTC, on day 1 of the month, in January"],
    ["0 6 * JAN,JUL *", "UTC", "at 06:00 UTC, in January and July"],
    ["@daily", "UTC", "every day at 00:00 UTC"],
    ["@hourly", "UTC", "every hour, on the hour"],
    ["@weekly", "UTC", "at 00:00 UTC, on Sunday"],
    // Six fields: seconds first.
    ["*/5 * * * * *", "UTC", "every 5 seconds"],
    ["* * * * * *", "UTC", "every second"],
    ["0 */5 * * * *", "UTC", "every 5 minutes"],
    ["30 0 9 * * *", "UTC", "every day at 09:00:30 UTC"],
    ["0 30 2 * * *", "UTC", "every day at 02:30 UTC"],
  ])("reads %s (%s) as %s", (expression, zone, words) => {
    expect(cronProblem(expression)).toBeUndefined(); // a form the coordinator accepts
    expect(cronWords(expression, zone)).toBe(words);
  });

  it("answers undefined for what it does not read, and for what is no cron expression", () => {
    for (const expression of ["0 0 L * *", "0 0 * * 5#3", "0 0 15W * *", "0 0 ? * MON", "1 2 3", "x * * * *"])
      expect(cronWords(expression), expression).toBeUndefined();
  });
});

describe("intervalWords and scheduleWords", () => {
  it("names an interval in its largest whole unit", () => {
    expect([1, 30, 60, 90, 900, 3600, 7200, 86400, 172800].map(intervalWords)).toEqual([
      "every second",
      "every 30 seconds",
      "every minute",
      "every 90 seconds",
      "every 15 minutes",
      "every hour",
      "every 2 hours",
      "every day",
      "every 2 days",
    ]);
  });

  it("reads a schedule's cron in its zone, or its interval, or leaves the expression as it is", () => {
    expect(scheduleWords({ cron: "0 9 * * *" })).toBe("every day at 09:00 UTC");
    expect(scheduleWords({ cron: "0 9 * * *", timezone: "Asia/Tokyo" })).toBe("every day at 09:00 Asia/Tokyo");
    expect(scheduleWords({ interval_seconds: 45 })).toBe("every 45 seconds");
    expect(scheduleWords({ cron: "0 0 L * *" })).toBe("cron 0 0 L * *");
  });
});
