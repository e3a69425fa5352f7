import { NestFactory } from '@nestjs/core';
import { appModule } from './app.js';

const app = await NestFactory.create(appModule(process.env.FLOODGATE_URL ?? 'http://127.0.0.1:8080'));
await app.listen(Number(process.env.PORT ?? 3000));
