import { createApp } from './app.js';

const app = await createApp(process.env.FLOODGATE_URL ?? 'http://127.0.0.1:8080');
await app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
console.log(`chat API on ${await app.getUrl()}`);
