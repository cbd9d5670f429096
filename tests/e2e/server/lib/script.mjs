// The scripted model outputs shared by the reasoning / tool-call tests (OpenAI and Anthropic): each rule is
// keyed by a tag in the user's text (or the tool result) and emits the exact text MiniMax-M3 would, in the
// format of tests/fixtures/minimax-m3/chat_template.jinja and serving-api.md §3.1 / §4.1.
export const NS = ']<]minimax[>[';

// One <tool_call> block with the given invokes: [{name, args: {param: raw text}}].
export function toolBlock(invokes) {
  let s = `${NS}<tool_call>\n`;
  for (const { name, args } of invokes) {
    s += `${NS}<invoke name="${name}">`;
    for (const [k, v] of Object.entries(args)) s += `${NS}<${k}>${v}${NS}</${k}>`;
    s += `${NS}</invoke>\n`;
  }
  return `${s}${NS}</tool_call>`;
}

export const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city'],
    },
  },
};
export const TIME_TOOL = {
  type: 'function',
  function: {
    name: 'get_time',
    description: 'Local time in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } } },
  },
};

export const SCRIPT = [
  // Reasoning, per thinking mode (serving-api.md §3.1).
  { match: '[enabled]', output: 'The user wants 2+2. That is 4.</mm:think>2 + 2 = 4.' },
  { match: '[disabled]', output: 'Paris is the capital of France.' },
  { match: '[disabled-stray]', output: '</mm:think>Paris, directly.' },
  { match: '[adaptive-think]', output: '<mm:think>Short thought.</mm:think>Adaptive answer.' },
  { match: '[adaptive-plain]', output: '</mm:think>Plain adaptive answer.' },
  { match: '[unterminated]', output: 'Still thinking and never closing' },
  // Tool calls; the second turn's rule is keyed by the tool result the template renders.
  { match: '<response>18 degrees and sunny</response>', output: 'It is 18 degrees and sunny in Paris.' },
  {
    match: '[weather]',
    output: '<mm:think>I need the weather tool.</mm:think>Let me check.' +
            toolBlock([{ name: 'get_weather', args: { city: 'Paris', days: '3' } }]),
  },
  // The same call without prose before it: what a forced tool choice (whose grammar admits only the markup
  // after the reasoning) lets through.
  {
    match: '[weather-call]',
    output: '<mm:think>I need the weather tool.</mm:think>' +
            toolBlock([{ name: 'get_weather', args: { city: 'Paris', days: '3' } }]),
  },
  {
    match: '[parallel]',
    output: toolBlock([{ name: 'get_weather', args: { city: 'Oslo' } },
                       { name: 'get_time', args: { city: 'Tokyo' } }]),
  },
  { match: '[multiline]', output: toolBlock([{ name: 'get_weather', args: { city: 'New\nYork <b>&' } }]) },
  { match: '[stop]', output: 'Alpha beta gamma delta epsilon.' },
  { match: '', output: 'Hello from the script.' },
];
