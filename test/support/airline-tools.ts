import type { ChatCompletionFunctionTool } from "openai/resources/chat/completions";

/**
 * Fourteen airline-style function tools (after the tau-bench airline domain): nested objects,
 * enums, arrays with bounds, required fields, integers and numbers with ranges, strict and not.
 * The structured-outputs test calls them; `npm run bench -- structured` compiles them.
 */
const passengers = {
  type: "object",
  properties: { adults: { type: "integer", minimum: 1, maximum: 9 }, children: { type: "integer", minimum: 0, maximum: 8 } },
  required: ["adults", "children"],
  additionalProperties: false,
};
const cabin = { type: "string", enum: ["basic_economy", "economy", "business"] };
const payment = { type: "object", properties: { method: { enum: ["credit_card", "gift_card", "certificate"] }, id: { type: "string" } }, required: ["method", "id"] };
const fn = (name: string, description: string, parameters: Record<string, unknown>, strict = false): ChatCompletionFunctionTool => ({
  type: "function",
  function: { name, description, parameters, ...(strict ? { strict: true } : {}) },
});

export const AIRLINE_TOOLS: ChatCompletionFunctionTool[] = [
  fn(
    "search_flights",
    "Search direct flights between two airports on a date",
    { type: "object", properties: { origin: { type: "string" }, destination: { type: "string" }, date: { type: "string" }, cabin, passengers }, required: ["origin", "destination", "date", "cabin", "passengers"], additionalProperties: false },
    true,
  ),
  fn("book_reservation", "Book a reservation", {
    type: "object",
    properties: {
      user_id: { type: "string" },
      flights: { type: "array", items: { type: "object", properties: { flight_number: { type: "string" }, date: { type: "string" } }, required: ["flight_number", "date"] }, minItems: 1, maxItems: 4 },
      cabin,
      passengers,
      payment,
      insurance: { type: "boolean" },
    },
    required: ["user_id", "flights", "cabin", "passengers", "payment", "insurance"],
  }),
  fn("book_seats", "Book seats on a flight", {
    type: "object",
    properties: { flight_id: { type: "string" }, seats: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 4 }, extras: { type: "object", properties: { bags: { type: "integer", minimum: 0, maximum: 3 }, meal: { type: "string", enum: ["none", "veg", "standard"] } }, required: ["bags"] } },
    required: ["flight_id", "seats"],
  }),
  fn("set_budget", "Set a fare budget", { type: "object", properties: { amount: { type: "number", minimum: 0, maximum: 10000 }, currency: { enum: ["EUR", "USD"] }, flexible: { type: "boolean" } }, required: ["amount", "currency", "flexible"] }),
  fn("get_user_details", "Get a user's profile", { type: "object", properties: { user_id: { type: "string" } }, required: ["user_id"], additionalProperties: false }, true),
  fn("get_reservation_details", "Get a reservation", { type: "object", properties: { reservation_id: { type: "string" } }, required: ["reservation_id"] }),
  fn("cancel_reservation", "Cancel a reservation", { type: "object", properties: { reservation_id: { type: "string" }, reason: { enum: ["change_of_plan", "airline_cancelled", "other"] } }, required: ["reservation_id", "reason"] }),
  fn("update_reservation_flights", "Change a reservation's flights", {
    type: "object",
    properties: { reservation_id: { type: "string" }, cabin, flights: { type: "array", items: { type: "object", properties: { flight_number: { type: "string" }, date: { type: "string" } }, required: ["flight_number", "date"] }, minItems: 1 }, payment },
    required: ["reservation_id", "cabin", "flights", "payment"],
  }),
  fn("update_reservation_baggages", "Change checked bags", { type: "object", properties: { reservation_id: { type: "string" }, total_baggages: { type: "integer", minimum: 0, maximum: 9 }, nonfree_baggages: { type: "integer", minimum: 0, maximum: 9 }, payment }, required: ["reservation_id", "total_baggages", "nonfree_baggages", "payment"] }),
  fn("update_reservation_passengers", "Change passenger names", {
    type: "object",
    properties: { reservation_id: { type: "string" }, passengers: { type: "array", items: { type: "object", properties: { first_name: { type: "string" }, last_name: { type: "string" }, dob: { type: "string" } }, required: ["first_name", "last_name", "dob"] }, minItems: 1, maxItems: 9 } },
    required: ["reservation_id", "passengers"],
  }),
  fn("list_all_airports", "List the airports served", { type: "object", properties: {} }),
  fn("calculate", "Evaluate an arithmetic expression", { type: "object", properties: { expression: { type: "string" }, precision: { type: "integer", minimum: 0, maximum: 6 } }, required: ["expression"] }),
  fn("send_certificate", "Send a travel certificate", { type: "object", properties: { user_id: { type: "string" }, amount: { type: "number", minimum: 0, maximum: 500 } }, required: ["user_id", "amount"] }),
  fn("transfer_to_human_agents", "Hand the conversation to a human", { type: "object", properties: { summary: { type: "string" }, urgency: { enum: ["low", "normal", "high"] } }, required: ["summary", "urgency"] }),
];
